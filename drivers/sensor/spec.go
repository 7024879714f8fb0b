package sensor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Spec says which part sits where: one entry of the config's "sensors" list.
type Spec struct {
	// Name is what users and the model call the sensor, e.g. "kitchen".
	Name string `json:"name"`
	// Type is the part: bme280, bmp280, sht3x, bh1750 or ds18b20.
	Type string `json:"type"`
	// Bus names the I²C bus ("1", "I2C1", "/dev/i2c-1"); empty means the first
	// bus. Not used by ds18b20, which sits on the kernel's 1-wire bus.
	Bus BusName `json:"bus,omitempty"`
	// Address is the I²C address (a number, or a string such as "0x76");
	// zero means the part's usual address.
	Address Address `json:"address,omitempty"`
	// Device is the 1-wire id of a ds18b20 ("28-0316a2795aff"); empty means
	// the only one present.
	Device string `json:"device,omitempty"`
}

// BusName names an I²C bus. In JSON it is a string ("1", "I2C1",
// "/dev/i2c-1") or a whole number (1), which is how people write bus 1.
type BusName string

// UnmarshalJSON accepts "1", "I2C1" and 1.
func (n *BusName) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*n = BusName(s)
		return nil
	}
	v, err := strconv.ParseUint(string(b), 10, 16)
	if err != nil {
		// The decoder fills in where the value sits ("bus", "sensors[0].bus").
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeFor[string]()}
	}
	*n = BusName(strconv.FormatUint(v, 10))
	return nil
}

// jsonKind names the kind of a JSON value the way json.UnmarshalTypeError
// does ("number 1.5", "bool", "array", "object").
func jsonKind(b []byte) string {
	switch {
	case len(b) == 0:
		return "nothing"
	case b[0] == '[':
		return "array"
	case b[0] == '{':
		return "object"
	case b[0] == 't' || b[0] == 'f':
		return "bool"
	case b[0] == 'n':
		return "null"
	}
	return "number " + string(b)
}

// Address is an I²C address. In JSON it is a number (118) or a string in
// decimal or hex ("0x76"), since JSON has no hex literals and datasheets
// give addresses in hex.
type Address int

// UnmarshalJSON accepts 118, "118" and "0x76".
func (a *Address) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := strconv.ParseInt(strings.TrimSpace(s), 0, 16)
		if err != nil {
			return fmt.Errorf("address %q is not a number; write it as 118 or \"0x76\"", s)
		}
		*a = Address(v)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("address must be a number or a string such as \"0x76\": %w", err)
	}
	v, err := strconv.ParseInt(n.String(), 10, 16)
	if err != nil {
		return fmt.Errorf("address %s is not a whole number; write it as 118 or \"0x76\"", n)
	}
	*a = Address(v)
	return nil
}

// String returns the address in hex, as datasheets and i2cdetect show it.
func (a Address) String() string { return fmt.Sprintf("0x%02x", int(a)) }

// validName reports whether s is 1-40 letters, digits, spaces, '-', '_'
// or '.', starting with a letter or digit. (A regexp with Unicode classes
// would do, at 1.5 MB of allocation in every process's start-up.)
func validName(s string) bool {
	n := 0
	for i, r := range s {
		n++
		alnum := unicode.IsLetter(r) || unicode.IsDigit(r)
		if !alnum && (i == 0 || !strings.ContainsRune(" _.-", r)) {
			return false
		}
	}
	return n >= 1 && n <= 40
}

// validW1ID reports whether s is a 1-wire id: family code, '-', 12 lower-case
// hex digits ("28-0316a2795aff").
func validW1ID(s string) bool {
	if len(s) != 15 || s[2] != '-' {
		return false
	}
	for i := range len(s) {
		if c := s[i]; i != 2 && !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Validate checks one entry; a message starts with the field to fix.
func (s Spec) Validate() error {
	if strings.TrimSpace(s.Name) == "" {
		return errors.New("name: missing; give the sensor a name such as \"kitchen\"")
	}
	if t := strings.TrimSpace(s.Name); t != s.Name {
		// The model, the page and MQTT ask for a sensor by its trimmed
		// name, which would never match.
		return fmt.Errorf("name: %q has spaces at its start or end; write it as %q", s.Name, t)
	}
	if !validName(s.Name) {
		return fmt.Errorf("name: %q must be 1-40 letters, digits, spaces, '-', '_' or '.', starting with a letter or digit", s.Name)
	}
	p, ok := parts[s.Type]
	if !ok {
		return fmt.Errorf("type: %q is not a supported part; use one of %s", s.Type, strings.Join(Types(), ", "))
	}
	if p.oneWire {
		if s.Address != 0 {
			return fmt.Errorf("address: a %s sits on the 1-wire bus and has no I2C address; remove it, "+
				"and set device to its 1-wire id if there are several", s.Type)
		}
		if b := strings.ToLower(strings.TrimSpace(string(s.Bus))); b != "" && b != "w1" && b != "1-wire" && b != "onewire" {
			return fmt.Errorf("bus: a %s sits on the kernel's 1-wire bus; leave bus empty or write \"w1\"", s.Type)
		}
		if s.Device != "" && !validW1ID(s.Device) {
			return fmt.Errorf("device: %q is not a 1-wire id; it looks like \"28-0316a2795aff\" (see /sys/bus/w1/devices)", s.Device)
		}
		return nil
	}
	if s.Device != "" {
		return fmt.Errorf("device: only a 1-wire part (ds18b20) has a device id; a %s is found by bus and address", s.Type)
	}
	if s.Address != 0 && !slices.Contains(p.addrs, int(s.Address)) {
		return fmt.Errorf("address: %s (%d) is not a %s address; use %s", s.Address, int(s.Address), s.Type, addrList(p.addrs))
	}
	if strings.ContainsAny(string(s.Bus), "\x00\n") {
		return fmt.Errorf("bus: %q is not a bus name; use a number such as \"1\"", s.Bus)
	}
	return nil
}

// ValidateSpecs checks every entry and that names are unique. Messages name
// the entry and field, e.g. "sensors[1].address: …".
func ValidateSpecs(specs []Spec) error {
	seen := map[string]int{}
	for i, s := range specs {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("sensors[%d].%w", i, err)
		}
		key := strings.ToLower(strings.TrimSpace(s.Name))
		if j, dup := seen[key]; dup {
			return fmt.Errorf("sensors[%d].name: %q is already the name of sensors[%d]; names must be unique", i, s.Name, j)
		}
		seen[key] = i
	}
	return nil
}

// address returns the configured address or the part's usual one.
func (s Spec) address() int {
	if s.Address != 0 {
		return int(s.Address)
	}
	if p, ok := parts[s.Type]; ok && len(p.addrs) > 0 {
		return p.addrs[0]
	}
	return 0
}

func addrList(addrs []int) string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = Address(a).String()
	}
	if len(out) == 2 {
		return out[0] + " or " + out[1]
	}
	return strings.Join(out, ", ")
}
