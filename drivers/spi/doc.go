// Package spi lists SPI devices and runs transfers on them through periph.io.
//
// # Concepts
//
// An SPI device is a bus plus a chip-select line; the kernel exposes each as
// /dev/spidevB.C. It is named the way people write it: "0.0", "SPI0.0",
// "spidev0.0" and "/dev/spidev0.0" are the same device, and "" is the first.
// periph's drivers run once, on the first call that needs them.
//
// A transfer is full duplex: every byte written clocks one byte in, so
// Transfer returns as many bytes as it sent. Read sends zeros and returns what
// came back; it still clocks the device, but sends nothing a device could act
// on as a command.
//
// Config carries the clock (Speed in Hz, default 1 MHz), the clock polarity
// and phase (Mode 0-3) and the word size (Bits, default 8). Every value is
// range-checked before a device is opened. Words wider than 8 bits occupy 2
// or 4 bytes each, as spidev lays them out, so the data length must be a
// multiple of the word's size.
//
// When the machine has no SPI device, calls return ErrNoDevice, whose text says
// how to enable SPI (raspi-config or dtparam=spi=on).
package spi
