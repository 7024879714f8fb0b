package periphhost

import (
	"bytes"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	refs := []Ref{
		{Name: "/dev/i2c-1", Aliases: []string{"I2C1"}, Number: 1},
		{Name: "/dev/i2c-20", Aliases: []string{"I2C20"}, Number: 20},
		{Name: "FT232H-I2C", Number: -1},
	}
	norm := strings.ToLower
	for name, want := range map[string]int{
		"": 0, " ": 0, "1": 0, "/dev/i2c-1": 0, "i2c1": 0, "20": 1, "I2C20": 1, "ft232h-i2c": 2, "2": -1, "-1": -1, "x": -1,
	} {
		if got := Find(refs, name, norm); got != want {
			t.Errorf("Find(%q) = %d, want %d", name, got, want)
		}
	}
	if got := Find(nil, "", norm); got != -1 {
		t.Errorf("Find in nothing = %d", got)
	}
}

func TestBytes(t *testing.T) {
	if b, err := Bytes([]int64{0, 127, 255}, 3); err != nil || !bytes.Equal(b, []byte{0, 127, 255}) {
		t.Errorf("Bytes = %v, %v", b, err)
	}
	for _, tt := range []struct {
		in   []int64
		want string
	}{
		{[]int64{1, 256}, "data[1] = 256 is not a byte (0-255)"},
		{[]int64{-1}, "data[0] = -1 is not a byte"},
		{[]int64{1, 2, 3, 4}, "4 data bytes; at most 3 at a time"},
	} {
		if _, err := Bytes(tt.in, 3); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Bytes(%v) error %v, want %q", tt.in, err, tt.want)
		}
	}
}
