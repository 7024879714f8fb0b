package i2c

import (
	"testing"

	"periph.io/x/conn/v3/i2c/i2ctest"

	"github.com/perchhq/perch/drivers/hwtest"
)

// TestDefaultBusIsThePinHeaders: with no bus named, a board whose device
// tree says which bus is on the pin header gets that one, also when a
// lower-numbered bus is present (a Pi's camera bus 0); it is listed first.
// Without the tree's word, the default is the lowest-numbered bus.
func TestDefaultBusIsThePinHeaders(t *testing.T) {
	hwtest.I2C(t, "FAKE-I2C41", nil, 41, &i2ctest.Playback{DontPanic: true})
	hwtest.I2C(t, "FAKE-I2C43", nil, 43, &i2ctest.Playback{DontPanic: true})
	if b, err := Lookup(""); err != nil || b.Number != 41 {
		t.Fatalf("default without a device tree: %+v, %v; want the lowest-numbered, 41", b, err)
	}
	hwtest.I2CHeader(t, 43)
	if b, err := Lookup(""); err != nil || b.Number != 43 {
		t.Fatalf("default with the header's bus named by the device tree: %+v, %v; want 43", b, err)
	}
	bs, err := Buses()
	if err != nil || len(bs) < 2 || bs[0].Number != 43 || !bs[0].Header || bs[1].Header {
		t.Fatalf("buses: %+v, %v; want the header's first, and only it marked so", bs, err)
	}
	if b, err := Lookup("41"); err != nil || b.Number != 41 {
		t.Fatalf("bus 41 by number: %+v, %v", b, err)
	}
}
