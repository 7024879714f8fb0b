package store

import "encoding/binary"

// fields reads the varint-framed records the store writes itself (session
// info, journal records). A short or malformed field marks it bad and
// yields zero values from then on, so a decoder reads every field and
// checks bad once.
type fields struct {
	b   []byte
	bad bool
}

func (f *fields) fail() {
	f.bad = true
	f.b = nil
}

func (f *fields) uvarint() uint64 {
	v, n := binary.Uvarint(f.b)
	if n <= 0 {
		f.fail()
		return 0
	}
	f.b = f.b[n:]
	return v
}

func (f *fields) varint() int64 {
	v, n := binary.Varint(f.b)
	if n <= 0 {
		f.fail()
		return 0
	}
	f.b = f.b[n:]
	return v
}

// bytes returns a length-prefixed field, aliasing the input.
func (f *fields) bytes() []byte {
	n := f.uvarint()
	if uint64(len(f.b)) < n {
		f.fail()
		return nil
	}
	v := f.b[:n:n]
	f.b = f.b[n:]
	return v
}

func (f *fields) str() string { return string(f.bytes()) }
