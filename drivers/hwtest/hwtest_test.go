package hwtest

import (
	"bytes"
	"testing"

	"periph.io/x/conn/v3/conntest"
	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/conn/v3/i2c/i2ctest"
	"periph.io/x/conn/v3/physic"
	"periph.io/x/conn/v3/spi"
	"periph.io/x/conn/v3/spi/spireg"
	"periph.io/x/conn/v3/spi/spitest"
)

// TestI2CSurvivesCloseOfTheCodeUnderTest: two open/Tx/Close rounds reach one
// Playback, as two tool calls on one bus would.
func TestI2CSurvivesCloseOfTheCodeUnderTest(t *testing.T) {
	pb := &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x40, W: []byte{1}},
		{Addr: 0x40, R: []byte{7}},
	}}
	reg := I2C(t, "HWTEST-I2C", []string{"HWTEST-ALIAS"}, 97, pb)
	for i, name := range []string{"97", "HWTEST-ALIAS"} {
		b, err := i2creg.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		var r []byte
		var w []byte
		if i == 0 {
			w = []byte{1}
		} else {
			r = make([]byte, 1)
		}
		if err := b.Tx(0x40, w, r); err != nil {
			t.Fatalf("Tx %d: %v", i, err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if i == 1 && r[0] != 7 {
			t.Errorf("read %v, want [7]", r)
		}
	}
	if pb.Count != 2 || reg.Opens() != 2 {
		t.Errorf("playback consumed %d ops in %d opens, want 2 in 2", pb.Count, reg.Opens())
	}
}

// TestSPIRecordsConnectParameters: the port remembers what speed, mode and
// bits each connection asked for, so tests can check them.
func TestSPIRecordsConnectParameters(t *testing.T) {
	pb := &spitest.Playback{Playback: conntest.Playback{DontPanic: true, Ops: []conntest.IO{
		{W: []byte{0x9f, 0}, R: []byte{0, 0xef}},
		{W: []byte{0x05}, R: []byte{0x00}},
	}}}
	port := SPI(t, "HWTEST-SPI", []string{"HWTEST-SPI-ALIAS"}, 98, pb)
	for i, c := range []Connect{{physic.MegaHertz, spi.Mode0, 8}, {2 * physic.MegaHertz, spi.Mode3, 16}} {
		p, err := spireg.Open("HWTEST-SPI")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := p.Connect(c.Freq, c.Mode, c.Bits)
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		if _, err := p.Connect(c.Freq, c.Mode, c.Bits); err == nil {
			t.Error("a second Connect on one open succeeded; a real port refuses it")
		}
		w := pb.Ops[i].W
		r := make([]byte, len(pb.Ops[i].R))
		if err := conn.Tx(w, r); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r, pb.Ops[i].R) {
			t.Errorf("read %x, want %x", r, pb.Ops[i].R)
		}
		p.Close()
	}
	got := port.Connects()
	if port.Opens() != 2 {
		t.Errorf("%d opens, want 2", port.Opens())
	}
	if len(got) != 2 || got[0].Freq != physic.MegaHertz || got[1].Mode != spi.Mode3 || got[1].Bits != 16 {
		t.Errorf("Connects() = %+v", got)
	}
}
