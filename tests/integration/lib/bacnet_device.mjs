// A BACnet/IP device simulator built on the npm library @bacnet-js/client: analog inputs with
// present-value and status-flags, on loopback at its own UDP port. It answers Who-Is (I-Am),
// ReadPropertyMultiple, ReadProperty and SubscribeCOV, sends confirmed COV notifications to
// its subscribers (and counts their SimpleACKs), and injects faults on request:
//   silent: true          no answer to any confirmed request
//   maxRefs: N, mode      RPMs asking for more than N properties get a Reject (buffer
//                         overflow) or, with mode 'abort', an Abort (segmentation not supported)
//   noRpm: true           RPM answered with Reject "unrecognized service" (ReadProperty only)
//   reorder: true         answers held back and sent in reverse order, a few at a time
//   covLimit: N           SubscribeCOV refused (resources) past N objects
//   covArrayAll: true     notifications carry property-array-index 4294967295 (the library's
//                         CovNotify.encode writes it when asked for ASN1_ARRAY_ALL)
//   covGarbage: true      notifications whose list of values is cut short (undecodable)
//   covNever: true        subscriptions acknowledged, no notification ever sent
// Analog values (avs: N, instances 0..N-1) are commandable: WriteProperty of present-value
// at a priority 1..16 (NULL relinquishes), present-value the first non-null slot, else the
// relinquish default (0); every write is kept in dev.writes.
import dgram from 'node:dgram';
import bacnet from '@bacnet-js/client'; // CommonJS: the module object, the class as .default

const BACnetClient = bacnet.default;
const {
  ApplicationTag, ConfirmedServiceChoice, ErrorClass, ErrorCode, ObjectType, PropertyIdentifier,
  StatusFlags, StatusFlagsBitString,
} = bacnet;

export function freeUdpPort() {
  return new Promise((resolve, reject) => {
    const s = dgram.createSocket('udp4');
    s.on('error', reject);
    s.bind(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const PV = PropertyIdentifier.PRESENT_VALUE;
const SF = PropertyIdentifier.STATUS_FLAGS;

export async function startBacnetDevice({ instance = 1001, objects = 20, covLimit = 1000, avs = 0 } = {}) {
  const port = await freeUdpPort();
  const client = new BACnetClient({ port, interface: '127.0.0.1', broadcastAddress: '127.0.0.1', apduTimeout: 1000 });
  await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('BACnet device did not start listening')), 5000);
    client.on('listening', () => { clearTimeout(t); resolve(); });
    client.on('error', (e) => { clearTimeout(t); reject(e); });
  });
  const dev = {
    port,
    instance,
    values: Array.from({ length: objects }, (_, i) => 20 + i + 0.25),
    flags: Array.from({ length: objects }, () => []),
    fault: { silent: false, maxRefs: 0, mode: 'reject', noRpm: false, reorder: false, covArrayAll: false,
      covGarbage: false, covNever: false },
    av: Array.from({ length: avs }, () => ({ pa: Array(16).fill(null), rd: 0 })),
    writes: [],
    covLimit,
    subs: new Map(), // instance -> {sender, processId, confirmed, expires}
    stats: { whoIs: 0, rpm: 0, rp: 0, rpDevice: 0, subscribe: 0, refused: 0, covSent: 0, covAcked: 0, maxRefs: 0, rejected: 0, aborted: 0 },
    client,
    held: [],
  };

  const avValue = (inst) => {
    const o = dev.av[inst];
    const v = o.pa.find((x) => x !== null);
    return v === undefined ? o.rd : v;
  };
  const valueOf = (inst, prop, type = ObjectType.ANALOG_INPUT) => {
    if (type === ObjectType.ANALOG_VALUE) {
      if (inst >= avs) return [{ type: 'error', value: { type: 'BacnetError', errorClass: ErrorClass.OBJECT, errorCode: ErrorCode.UNKNOWN_OBJECT } }];
      if (prop === PV) return [{ type: ApplicationTag.REAL, value: avValue(inst) }];
      if (prop === SF) return [{ type: ApplicationTag.BIT_STRING, value: new StatusFlagsBitString() }];
    }
    if (inst >= objects) return [{ type: 'error', value: { type: 'BacnetError', errorClass: ErrorClass.OBJECT, errorCode: ErrorCode.UNKNOWN_OBJECT } }];
    if (prop === PV) return [{ type: ApplicationTag.REAL, value: dev.values[inst] }];
    if (prop === SF) return [{ type: ApplicationTag.BIT_STRING, value: new StatusFlagsBitString(...dev.flags[inst]) }];
    return [{ type: 'error', value: { type: 'BacnetError', errorClass: ErrorClass.PROPERTY, errorCode: ErrorCode.UNKNOWN_PROPERTY } }];
  };

  // Sends an answer now, or holds it back to send a batch of them in reverse order.
  const answer = (fn) => {
    if (!dev.fault.reorder) return fn();
    dev.held.push(fn);
    if (dev.held.length === 1) {
      setTimeout(() => {
        const h = dev.held.splice(0).reverse();
        h.forEach((f) => f());
      }, 20);
    }
  };

  // Reject and Abort: the library has no call for them, so the 3-octet APDU goes into one of
  // its buffers behind a plain NPDU and leaves through its own BVLC layer.
  const sendRaw = (receiver, apdu) => {
    const buffer = client._getApduBuffer(receiver);
    const bytes = [0x01, 0x00, ...apdu];
    bytes.forEach((b) => { buffer.buffer[buffer.offset++] = b; });
    client.sendBvlc(receiver, buffer);
  };

  client.on('whoIs', (msg) => {
    dev.stats.whoIs++;
    const { lowLimit, highLimit } = msg.payload || {};
    if (lowLimit !== undefined && highLimit !== undefined && (instance < lowLimit || instance > highLimit)) return;
    client.iAmResponse(msg.header.sender, instance, 3 /* no segmentation */, 999);
  });

  client.on('readPropertyMultiple', (msg) => {
    dev.stats.rpm++;
    if (dev.fault.silent) return;
    const specs = msg.payload.properties;
    const refs = specs.reduce((n, s) => n + s.properties.length, 0);
    dev.stats.maxRefs = Math.max(dev.stats.maxRefs, refs);
    const sender = msg.header.sender;
    if (dev.fault.noRpm) {
      dev.stats.rejected++;
      return answer(() => sendRaw(sender, [0x60, msg.invokeId, 9]));
    }
    if (dev.fault.maxRefs && refs > dev.fault.maxRefs) {
      if (dev.fault.mode === 'abort') {
        dev.stats.aborted++;
        return answer(() => sendRaw(sender, [0x71, msg.invokeId, 4]));
      }
      dev.stats.rejected++;
      return answer(() => sendRaw(sender, [0x60, msg.invokeId, 1]));
    }
    const values = specs.map((s) => ({
      objectId: s.objectId,
      values: s.properties.map((p) => ({
        property: { id: p.id, index: p.index },
        value: s.objectId.type === ObjectType.ANALOG_INPUT || s.objectId.type === ObjectType.ANALOG_VALUE
          ? valueOf(s.objectId.instance, p.id, s.objectId.type) : valueOf(objects, p.id),
      })),
    }));
    answer(() => client.readPropertyMultipleResponse(sender, msg.invokeId, values));
  });

  client.on('readProperty', (msg) => {
    if (dev.fault.silent) return;
    const { objectId, property } = msg.payload;
    const sender = msg.header.sender;
    if (objectId.type === ObjectType.DEVICE) { // max-apdu-length-accepted, system-status
      dev.stats.rpDevice++;
      const v = property.id === PropertyIdentifier.MAX_APDU_LENGTH_ACCEPTED
        ? { type: ApplicationTag.UNSIGNED_INTEGER, value: 1476 } : { type: ApplicationTag.ENUMERATED, value: 0 };
      return answer(() => client.readPropertyResponse(sender, msg.invokeId, objectId, property, [v]));
    }
    dev.stats.rp++;
    const v = objectId.type === ObjectType.ANALOG_INPUT || objectId.type === ObjectType.ANALOG_VALUE
      ? valueOf(objectId.instance, property.id, objectId.type) : valueOf(objects, 0);
    if (v[0].type === 'error') {
      return answer(() => client.errorResponse(sender, ConfirmedServiceChoice.READ_PROPERTY, msg.invokeId,
        v[0].value.errorClass, v[0].value.errorCode));
    }
    answer(() => client.readPropertyResponse(sender, msg.invokeId, objectId, property, v));
  });

  client.on('writeProperty', (msg) => {
    if (dev.fault.silent) return;
    const { objectId, value } = msg.payload;
    const sender = msg.header.sender;
    const v = value.value[0] || {};
    dev.writes.push({ type: objectId.type, instance: objectId.instance, property: value.property.id,
      priority: value.priority, tag: v.type, value: v.value });
    if (objectId.type !== ObjectType.ANALOG_VALUE || objectId.instance >= avs || value.property.id !== PV) {
      return client.errorResponse(sender, ConfirmedServiceChoice.WRITE_PROPERTY, msg.invokeId,
        ErrorClass.PROPERTY, ErrorCode.WRITE_ACCESS_DENIED);
    }
    if (v.type !== ApplicationTag.REAL && v.type !== ApplicationTag.NULL) {
      return client.errorResponse(sender, ConfirmedServiceChoice.WRITE_PROPERTY, msg.invokeId,
        ErrorClass.PROPERTY, ErrorCode.INVALID_DATA_TYPE);
    }
    dev.av[objectId.instance].pa[value.priority - 1] = v.type === ApplicationTag.NULL ? null : v.value;
    client.simpleAckResponse(sender, ConfirmedServiceChoice.WRITE_PROPERTY, msg.invokeId);
  });

  client.on('subscribeCov', (msg) => {
    dev.stats.subscribe++;
    if (dev.fault.silent) return;
    const p = msg.payload;
    const sender = msg.header.sender;
    const inst = p.monitoredObjectId.instance;
    if (p.monitoredObjectId.type !== ObjectType.ANALOG_INPUT || inst >= objects ||
        (!dev.subs.has(inst) && dev.subs.size >= dev.covLimit)) {
      dev.stats.refused++;
      return client.errorResponse(sender, ConfirmedServiceChoice.SUBSCRIBE_COV, msg.invokeId,
        ErrorClass.RESOURCES, ErrorCode.COV_SUBSCRIPTION_FAILED);
    }
    if (p.cancellationRequest) {
      dev.subs.delete(inst);
    } else {
      dev.subs.set(inst, { sender, processId: p.subscriberProcessId, confirmed: p.issueConfirmedNotifications,
        expires: Date.now() + p.lifetime * 1000 });
    }
    client.simpleAckResponse(sender, ConfirmedServiceChoice.SUBSCRIBE_COV, msg.invokeId);
    if (!p.cancellationRequest) setTimeout(() => dev.notify(inst), 5); // the initial notification
  });

  // Sends a COV notification for object inst to its subscriber (if any, and not expired).
  dev.notify = (inst) => {
    const s = dev.subs.get(inst);
    if (!s || s.expires < Date.now() || dev.fault.silent || dev.fault.covNever) return false;
    const index = dev.fault.covArrayAll ? bacnet.ASN1_ARRAY_ALL : undefined;
    const values = [
      { property: { id: PV, index }, value: valueOf(inst, PV) },
      { property: { id: SF, index }, value: valueOf(inst, SF) },
    ];
    const remaining = Math.max(0, Math.round((s.expires - Date.now()) / 1000));
    dev.stats.covSent++;
    if (dev.fault.covGarbage) {
      // a confirmed notification whose REAL value is cut after 2 of its 4 octets
      const oid = (t, i) => { const x = ((t << 22) | i) >>> 0; return [x >>> 24, (x >>> 16) & 255, (x >>> 8) & 255, x & 255]; };
      const pid = s.processId;
      sendRaw(s.sender, [0x00, 0x05, (dev.garbageInvoke = ((dev.garbageInvoke || 0) + 1) & 255), 0x01,
        0x0a, (pid >> 8) & 255, pid & 255, 0x1c, ...oid(ObjectType.DEVICE, instance),
        0x2c, ...oid(ObjectType.ANALOG_INPUT, inst), 0x39, remaining & 255,
        0x4e, 0x09, PV, 0x2e, 0x44, 0x42, 0x28]);
      return true;
    }
    if (s.confirmed) {
      client.confirmedCOVNotification(s.sender, { type: ObjectType.ANALOG_INPUT, instance: inst }, s.processId, instance,
        remaining, values).then(() => { dev.stats.covAcked++; }, () => {});
    } else {
      client.unconfirmedCOVNotification(s.sender, s.processId, instance, { type: ObjectType.ANALOG_INPUT, instance: inst },
        remaining, values);
    }
    return true;
  };

  dev.set = (inst, v) => {
    dev.values[inst] = v;
    dev.notify(inst);
  };
  dev.setFlags = (inst, flags) => {
    dev.flags[inst] = flags;
    dev.notify(inst);
  };
  dev.close = () => client.close();
  return dev;
}

export { StatusFlags };
