#!/usr/bin/python3
"""A Modbus server on Debian's python3-pymodbus (3.0), for the integration tests.

Usage: pymodbus_server.py tcp PORT | rtu DEVICE BAUD PARITY
Units 1 and 2 (others unanswered: a missing unit times out), each with 50 holding registers
(unit u, address a: u*100 + a), 50 input registers (u*1000 + a), 50 coils and discrete inputs
(odd addresses on); addresses 50 and above answer exception 02. Holding registers 20-21 of
unit 1 hold the float32 21.5 (big-endian words). Prints "ready" once the data is set up.
"""
import struct
import sys

from pymodbus.datastore import ModbusSequentialDataBlock, ModbusServerContext, ModbusSlaveContext
from pymodbus.server import StartSerialServer, StartTcpServer
from pymodbus.transaction import ModbusRtuFramer


def unit(u):
    hr = [u * 100 + a for a in range(50)]
    hi, lo = struct.unpack('>HH', struct.pack('>f', 21.5))
    if u == 1:
        hr[20], hr[21] = hi, lo
    bits = [a % 2 == 1 for a in range(50)]
    return ModbusSlaveContext(
        hr=ModbusSequentialDataBlock(0, hr),
        ir=ModbusSequentialDataBlock(0, [u * 1000 + a for a in range(50)]),
        co=ModbusSequentialDataBlock(0, list(bits)),
        di=ModbusSequentialDataBlock(0, list(bits)),
        zero_mode=True)


def main():
    ctx = ModbusServerContext(slaves={1: unit(1), 2: unit(2)}, single=False)
    print('ready', flush=True)
    if sys.argv[1] == 'tcp':
        StartTcpServer(context=ctx, address=('127.0.0.1', int(sys.argv[2])), allow_reuse_address=True)
    else:
        StartSerialServer(context=ctx, framer=ModbusRtuFramer, port=sys.argv[2], baudrate=int(sys.argv[3]),
                          parity=sys.argv[4], bytesize=8, stopbits=1, timeout=0.05,
                          ignore_missing_slaves=True)


if __name__ == '__main__':
    main()
