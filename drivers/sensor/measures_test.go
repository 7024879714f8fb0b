package sensor

import (
	"context"
	"reflect"
	"testing"

	"periph.io/x/conn/v3/i2c/i2ctest"

	"github.com/perchhq/perch/drivers/hwtest"
)

// TestMeasuresMatchReadings: what Measures announces for each part is what
// a reading of that part holds, quantity and unit, in order; every part
// type is covered, so a new part cannot be added without its measures.
func TestMeasuresMatchReadings(t *testing.T) {
	parts := map[string]struct {
		spec Spec
		ops  []i2ctest.IO
	}{
		"bme280": {Spec{Name: "a", Type: "bme280"}, bme280Ops(0x76, 0x60)},
		"bmp280": {Spec{Name: "a", Type: "bmp280"}, bme280Ops(0x76, 0x58)},
		"sht3x": {Spec{Name: "a", Type: "sht3x"}, []i2ctest.IO{
			{Addr: 0x44, W: []byte{0x24, 0x00}},
			{Addr: 0x44, R: []byte{0x66, 0x66, 0x93, 0x80, 0x00, 0xa2}},
		}},
		"bh1750": {Spec{Name: "a", Type: "bh1750"}, []i2ctest.IO{
			{Addr: 0x23, W: []byte{0x07}}, {Addr: 0x23, W: []byte{0x10}}, {Addr: 0x23, W: []byte{0x07}},
			{Addr: 0x23, W: []byte{0x10}}, {Addr: 0x23, W: []byte{0x10}, R: []byte{0x01, 0x90}},
		}},
		"ds18b20": {Spec{Name: "a", Type: "ds18b20"}, nil},
	}
	for i, typ := range Types() {
		t.Run(typ, func(t *testing.T) {
			p, ok := parts[typ]
			if !ok {
				t.Fatalf("no reading for part %s in this test; add one", typ)
			}
			if p.ops != nil {
				hwtest.I2C(t, "FAKE-MEASURES-BUS", nil, 80+i, &i2ctest.Playback{Ops: p.ops, DontPanic: true})
				p.spec.Bus = "FAKE-MEASURES-BUS"
			}
			set, err := NewSet([]Spec{p.spec}, Options{W1Dir: "testdata/w1-one"})
			if err != nil {
				t.Fatal(err)
			}
			r, err := set.Read(context.Background(), "a")
			if err != nil {
				t.Fatal(err)
			}
			var got []Measure
			for _, v := range r.Values {
				got = append(got, Measure{v.Quantity, v.Unit})
			}
			if want := Measures(typ); !reflect.DeepEqual(got, want) {
				t.Errorf("reading holds %v, Measures says %v", got, want)
			}
		})
	}
	if Measures("dht22") != nil {
		t.Error("an unknown part has measures")
	}
}
