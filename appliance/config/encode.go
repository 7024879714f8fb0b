package config

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
)

// Encode renders c as the config file: every key in declaration order, two
// spaces of indent, secrets in clear (the file is 0600).
func (c *Config) Encode() ([]byte, error) {
	var buf bytes.Buffer
	if err := encodeValue(&buf, reflect.ValueOf(*c), ""); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

var secretType = reflect.TypeOf(Secret(""))

func encodeValue(buf *bytes.Buffer, v reflect.Value, indent string) error {
	if v.Type() == secretType {
		b, _ := json.Marshal(v.String()) // reflect's String gives the raw text
		buf.Write(b)
		return nil
	}
	switch v.Kind() {
	case reflect.Struct:
		t := v.Type()
		buf.WriteString("{")
		first := true
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			_, opts, _ := cutTag(f.Tag.Get("json"))
			if opts == "omitempty" && v.Field(i).IsZero() {
				continue
			}
			if !first {
				buf.WriteString(",")
			}
			first = false
			fmt.Fprintf(buf, "\n%s  %q: ", indent, jsonName(f))
			if err := encodeValue(buf, v.Field(i), indent+"  "); err != nil {
				return err
			}
		}
		if !first {
			buf.WriteString("\n" + indent)
		}
		buf.WriteString("}")
	case reflect.Slice:
		if v.Len() == 0 {
			buf.WriteString("[]")
			return nil
		}
		if v.Type().Elem().Kind() != reflect.Struct {
			b, err := json.Marshal(v.Interface())
			if err != nil {
				return err
			}
			buf.Write(b)
			return nil
		}
		buf.WriteString("[")
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				buf.WriteString(",")
			}
			buf.WriteString("\n" + indent + "  ")
			if err := encodeValue(buf, v.Index(i), indent+"  "); err != nil {
				return err
			}
		}
		buf.WriteString("\n" + indent + "]")
	default:
		b, err := json.Marshal(v.Interface())
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	return nil
}

func cutTag(tag string) (name, opts string, ok bool) {
	for i := 0; i < len(tag); i++ {
		if tag[i] == ',' {
			return tag[:i], tag[i+1:], true
		}
	}
	return tag, "", false
}

// Save writes c to its Path atomically (temp file, fsync, rename) with mode
// 0600, so a crash or a full disk never leaves a half-written config.
func (c *Config) Save() error {
	data, err := c.Encode()
	if err != nil {
		return fmt.Errorf("config: encode: %w", err)
	}
	return WriteFileAtomic(c.path, data, 0o600)
}

// WriteFileAtomic replaces path with data via a temp file in the same
// directory, fsynced before the rename and the directory after it.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("config: create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("config: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("config: write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("config: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("config: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("config: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("config: write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// NewToken returns a random 32-hex-digit token for gateway.api_token.
func NewToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("config: no randomness: " + err.Error()) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}
