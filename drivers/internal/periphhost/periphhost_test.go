package periphhost

import (
	"errors"
	"strings"
	"testing"

	"periph.io/x/conn/v3/driver/driverreg"
)

// TestInitRunsTheSysfsBusDrivers: the I2C and SPI drivers must be among the
// drivers Init ran (loaded where buses exist, skipped where not); without
// them no bus would ever be found.
func TestInitRunsTheSysfsBusDrivers(t *testing.T) {
	if err := Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	st, err := driverreg.Init() // returns the state of the first run
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]bool{}
	for _, d := range st.Loaded {
		ran[d.String()] = true
	}
	for _, f := range st.Skipped {
		ran[f.D.String()] = true
	}
	for _, f := range st.Failed {
		t.Errorf("driver %s failed: %v", f.D, f.Err)
	}
	for _, want := range []string{"sysfs-i2c", "sysfs-spi"} {
		if !ran[want] {
			t.Errorf("driver %s did not run; ran: %v", want, ran)
		}
	}
}

func TestLookup(t *testing.T) {
	type dev struct{ name string }
	all := []dev{{"SPI0.0"}, {"SPI0.1"}}
	ref := func(d dev) Ref { return Ref{Name: d.name, Number: -1} }
	label := func(d dev) string { return d.name }
	norm := strings.ToLower
	if got, err := Lookup(all, "spi0.1", "devices", ref, label, norm, errNotFound); err != nil || got.name != "SPI0.1" {
		t.Errorf("Lookup = %v, %v", got, err)
	}
	if got, err := Lookup(all, "", "devices", ref, label, norm, errNotFound); err != nil || got.name != "SPI0.0" {
		t.Errorf("empty name = %v, %v; want the first", got, err)
	}
	_, err := Lookup(all, "spi9", "devices", ref, label, norm, errNotFound)
	if !errors.Is(err, errNotFound) || !strings.Contains(err.Error(), `"spi9"; devices present: SPI0.0, SPI0.1`) {
		t.Errorf("unknown = %v", err)
	}
}

var errNotFound = errors.New("unknown device")
