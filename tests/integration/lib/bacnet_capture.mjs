// Captures real BACnet/IP datagrams from the npm library @bacnet-js/client into the fuzz seed
// corpus (fuzz/corpus/bacnet/lib-*): what it sends as a client (Who-Is, ReadProperty,
// ReadPropertyMultiple, SubscribeCOV) and what the device simulator built on it answers
// (I-Am, RPM and RP acks with values and errors, Error, SimpleACK, COV notifications).
// Usage: node tests/integration/lib/bacnet_capture.mjs [OUTDIR]
import dgram from 'node:dgram';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import bacnet from '@bacnet-js/client';
import { startBacnetDevice, freeUdpPort, StatusFlags } from './bacnet_device.mjs';

const out = process.argv[2] || new URL('../../../fuzz/corpus/bacnet', import.meta.url).pathname;
mkdirSync(out, { recursive: true });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const { ObjectType, PropertyIdentifier } = bacnet;

const sock = dgram.createSocket('udp4');
const port = await freeUdpPort();
await new Promise((r) => sock.bind(port, '127.0.0.1', r));
const got = [];
sock.on('message', (m, r) => {
  got.push(m);
  if (m.length > 9 && m[6] === 0x00 && m[9] === 0x01) // a confirmed COV notification: acknowledge
    sock.send(Buffer.from([0x81, 0x0a, 0, 9, 1, 0, 0x20, m[8], 1]), r.port, '127.0.0.1');
});
const save = (name, buf) => writeFileSync(join(out, `lib-${name}`), buf);
const take = async (name, ms = 100) => {
  await sleep(ms);
  const m = got.shift();
  if (m) save(name, m);
  else console.error(`nothing captured for ${name}`);
  return m;
};
const send = (dst, hex) => {
  const b = Buffer.from(hex.replace(/ /g, ''), 'hex');
  b.writeUInt16BE(b.length, 2);
  sock.send(b, dst, '127.0.0.1');
};

// The library as a client, talking to our socket (its requests time out: ignored).
const client = new bacnet.default({ port: await freeUdpPort(), interface: '127.0.0.1', broadcastAddress: '127.0.0.1', apduTimeout: 200 });
await new Promise((r) => client.on('listening', r));
const me = { address: `127.0.0.1:${port}` };
const ai = (i) => ({ type: ObjectType.ANALOG_INPUT, instance: i });
client.whoIs(me, { lowLimit: 1000, highLimit: 1999 });
await take('client-who-is');
client.readProperty(me, ai(5), PropertyIdentifier.PRESENT_VALUE).catch(() => {});
await take('client-read-property');
client.readPropertyMultiple(me, [{ objectId: ai(16), properties: [{ id: 85, index: 0xffffffff }, { id: 111, index: 0xffffffff }] },
  { objectId: { type: ObjectType.DEVICE, instance: 1001 }, properties: [{ id: 76, index: 0 }] }]).catch(() => {});
await take('client-rpm');
client.subscribeCov(me, ai(3), 77, false, true, 300).catch(() => {});
await take('client-subscribe-cov');
await sleep(300);
client.close();

// The device simulator answering our requests.
const dev = await startBacnetDevice({ instance: 1001, objects: 4 });
dev.setFlags(2, [StatusFlags.FAULT, StatusFlags.OUT_OF_SERVICE]);
send(dev.port, '810b0000 0120ffff00ff 1008');
await take('device-i-am');
send(dev.port, '810a0000 0104 0005110c 0c00000001 1955');
await take('device-read-property-ack');
send(dev.port, '810a0000 0104 0005120c 0c00000009 1955');
await take('device-error');
send(dev.port, '810a0000 0104 0005130e 0c00000000 1e0955096f1f 0c00000002 1e0955096f1f 0c00000063 1e09551f');
await take('device-rpm-ack');
send(dev.port, '810a0000 0104 00051405 0a6f70 1c00000001 2901 393c');
await take('device-simple-ack', 50);
await take('device-cov-confirmed', 100);
dev.set(1, 42.5);
await take('device-cov-confirmed-2');
send(dev.port, '810a0000 0104 00051505 0a6f71 1c00000000 2900 393c');
await take('device-simple-ack-2', 50);
await take('device-cov-unconfirmed', 100);
dev.close();
sock.close();
console.log(`captured into ${out}`);
