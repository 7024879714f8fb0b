package periphhost

import (
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
