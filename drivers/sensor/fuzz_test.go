package sensor

import (
	"encoding/json"
	"testing"
)

// FuzzSpecJSON: a config's sensors list, however malformed, decodes or fails
// cleanly, and what decodes either validates or says which field to fix.
func FuzzSpecJSON(f *testing.F) {
	f.Add([]byte(`[{"name":"kitchen","type":"bme280","bus":"1","address":"0x76"}]`))
	f.Add([]byte(`[{"name":"tank","type":"ds18b20","device":"28-0316a2795aff"}]`))
	f.Add([]byte(`[{"name":"x","type":"sht3x","address":68},{"name":"X","type":"bh1750"}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var specs []Spec
		if json.Unmarshal(b, &specs) != nil {
			return
		}
		if err := ValidateSpecs(specs); err != nil {
			if len(err.Error()) < len("sensors[0].x") || err.Error()[:8] != "sensors[" {
				t.Fatalf("error %q does not name the entry", err)
			}
			return
		}
		if _, err := NewSet(specs, Options{}); err != nil {
			t.Fatalf("valid specs refused by NewSet: %v", err)
		}
	})
}
