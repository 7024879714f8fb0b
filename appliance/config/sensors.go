package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/perchhq/perch/drivers/sensor"
)

// Sensors is the "sensors" key: which parts sit where, and how often the
// gateway samples them into the history. It is written either as the list
// of parts alone (the original form, still valid):
//
//	"sensors": [{"name": "greenhouse", "type": "bme280", "bus": "1"}]
//
// or as an object that also holds the sampling interval:
//
//	"sensors": {"sample_seconds": 60, "parts": [{"name": "greenhouse", ...}]}
//
// The list is called parts in the object because each entry names a part
// (bme280, sht3x, …) and where it sits; "sensors.sensors" would read badly.
// Perch writes the object form when it saves the file.
type Sensors struct {
	// SampleSeconds is how often every sensor is read into the history
	// (sensors.sample_seconds, PERCH_SENSORS_SAMPLE_SECONDS).
	SampleSeconds int `json:"sample_seconds"`
	// Parts are the configured sensors (sensors.parts, or the whole
	// "sensors" array).
	Parts []sensor.Spec `json:"parts"`

	// asArray records that the file used the array form, so errors name
	// sensors[i] as the owner wrote it rather than sensors.parts[i].
	asArray bool
}

// Bounds of sensors.sample_seconds: a sample every 10 s keeps the raw
// history of 48 hours under 100 KB per quantity; one an hour is the
// coarsest point the hourly history can still show.
const (
	DefaultSampleSeconds = 60
	MinSampleSeconds     = 10
	MaxSampleSeconds     = 3600
)

var sensorsType = reflect.TypeOf(Sensors{})

// UnmarshalJSON accepts the array form and the object form. The object is
// decoded over the current values, so an absent sample_seconds keeps its
// default; the array form replaces only the parts.
func (s *Sensors) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '[':
		parts, err := decodeParts(b, "")
		if err != nil {
			return err
		}
		s.Parts, s.asArray = parts, true
		return nil
	case len(b) > 0 && b[0] == '{':
		var obj struct {
			SampleSeconds *int            `json:"sample_seconds"`
			Parts         json.RawMessage `json:"parts"`
		}
		if err := json.Unmarshal(b, &obj); err != nil {
			return err
		}
		if obj.SampleSeconds != nil {
			s.SampleSeconds = *obj.SampleSeconds
		}
		if obj.Parts != nil {
			parts, err := decodeParts(obj.Parts, "parts")
			if err != nil {
				return err
			}
			s.Parts = parts
		}
		s.asArray = false
		return nil
	case string(b) == "null":
		return nil
	}
	return errors.New(`"sensors" must be a list of parts ([{"name": …, "type": …}]) or an object {"sample_seconds": 60, "parts": [...]}`)
}

// decodeParts decodes a list of parts one entry at a time, so a mistyped
// value is named with its entry (parts[1].bus), which json names only by
// its key.
func decodeParts(b []byte, key string) ([]sensor.Spec, error) {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		if te, ok := err.(*json.UnmarshalTypeError); ok {
			te.Field = key
		}
		return nil, err
	}
	parts := make([]sensor.Spec, len(raws))
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &parts[i]); err != nil {
			entry := fmt.Sprintf("%s[%d]", key, i)
			if te, ok := err.(*json.UnmarshalTypeError); ok {
				// The caller puts "sensors" in front.
				te.Field = join(entry, te.Field)
				return nil, err
			}
			return nil, fmt.Errorf("%s: %w", join("sensors", entry), err)
		}
	}
	return parts, nil
}

// wholeFromEnv marks struct keys that an environment variable may also
// set as a whole (PERCH_SENSORS holds JSON of either form) besides their
// fields (PERCH_SENSORS_SAMPLE_SECONDS).
func (s *Sensors) wholeFromEnv() {}

type wholeFromEnv interface{ wholeFromEnv() }

func (s *Sensors) validate() []error {
	var errs []error
	if s.SampleSeconds < MinSampleSeconds || s.SampleSeconds > MaxSampleSeconds {
		errs = append(errs, fmt.Errorf("sensors.sample_seconds: must be between %d and %d seconds, got %d (default %d)",
			MinSampleSeconds, MaxSampleSeconds, s.SampleSeconds, DefaultSampleSeconds))
	}
	if err := sensor.ValidateSpecs(s.Parts); err != nil {
		if !s.asArray {
			// ValidateSpecs names entries sensors[i]; in the object form
			// they are sensors.parts[i].
			err = errors.New(strings.Replace(err.Error(), "sensors[", "sensors.parts[", 1))
		}
		errs = append(errs, err)
	}
	return errs
}
