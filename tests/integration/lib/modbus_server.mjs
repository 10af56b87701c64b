// A Modbus TCP server for the driver tests, built on the npm package `modbus-serial`
// (ServerTCP): holding and input registers, coils and discrete inputs of any unit id, a log
// of the read requests it served, fault injection (stop and restart on the same port,
// silence: requests are taken but never answered), and addresses past `size` answered with
// the exception "illegal data address".
import ModbusRTU from 'modbus-serial';

export class ModbusServer {
  constructor({ port, size = 100 }) {
    this.port = port;
    this.size = size;
    this.units = new Map(); // unit id -> {holding, input, coils, discrete}
    this.requests = [];     // register reads served: [fc, unit, address, count]
    this.times = [];        // when each read request arrived (Date.now()), any function code
    this.silent = false;
    this.unreachable = new Set(); // unit ids answered "gateway target device failed to respond"
    this.server = null;
  }

  unit(id) {
    if (!this.units.has(id)) {
      this.units.set(id, {
        holding: new Array(this.size).fill(0),
        input: new Array(this.size).fill(0),
        coils: new Array(this.size).fill(false),
        discrete: new Array(this.size).fill(false),
      });
    }
    return this.units.get(id);
  }

  _get(table, fc) {
    return (addr, unitID, cb) => {
      if (this.silent) return; // never answers: the client times out
      this.times.push(Date.now());
      if (fc >= 3) this.requests.push([fc, unitID, addr, 1]);
      if (this.unreachable.has(unitID)) {
        cb({ modbusErrorCode: 0x0B, msg: 'Gateway target device failed to respond' });
        return;
      }
      if (addr >= this.size) {
        cb({ modbusErrorCode: 0x02, msg: 'Illegal data address' });
        return;
      }
      cb(null, this.unit(unitID)[table][addr]);
    };
  }

  // Reads of more than one register come here whole, so the log shows the request.
  _getMany(table, fc) {
    return (addr, length, unitID, cb) => {
      if (this.silent) return;
      this.times.push(Date.now());
      this.requests.push([fc, unitID, addr, length]);
      if (this.unreachable.has(unitID)) {
        cb({ modbusErrorCode: 0x0B, msg: 'Gateway target device failed to respond' });
        return;
      }
      if (addr + length > this.size) {
        cb({ modbusErrorCode: 0x02, msg: 'Illegal data address' });
        return;
      }
      cb(null, this.unit(unitID)[table].slice(addr, addr + length));
    };
  }

  start() {
    const vector = {
      getHoldingRegister: this._get('holding', 3),
      getInputRegister: this._get('input', 4),
      getMultipleHoldingRegisters: this._getMany('holding', 3),
      getMultipleInputRegisters: this._getMany('input', 4),
      getCoil: this._get('coils', 1),
      getDiscreteInput: this._get('discrete', 2),
      setRegister: (addr, value, unitID, cb) => {
        if (addr >= this.size) return cb({ modbusErrorCode: 0x02, msg: 'Illegal data address' });
        this.unit(unitID).holding[addr] = value;
        cb(null);
      },
      setCoil: (addr, value, unitID, cb) => {
        if (addr >= this.size) return cb({ modbusErrorCode: 0x02, msg: 'Illegal data address' });
        this.unit(unitID).coils[addr] = !!value;
        cb(null);
      },
    };
    return new Promise((resolve, reject) => {
      this.server = new ModbusRTU.ServerTCP(vector, { host: '127.0.0.1', port: this.port, unitID: 255 });
      this.server.on('initialized', resolve);
      this.server.on('serverError', reject);
      this.server.on('error', () => { /* a request it could not answer */ });
      this.server.on('socketError', () => { /* a client went away */ });
    });
  }

  stop() {
    if (!this.server) return Promise.resolve();
    const s = this.server;
    this.server = null;
    return new Promise((resolve) => s.close(() => resolve()));
  }
}
