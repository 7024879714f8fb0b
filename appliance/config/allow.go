package config

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
)

// allowMu serialises AddAllowFrom's read-modify-write of the file within
// the process (the gateway's API and the page may approve at once).
var allowMu sync.Mutex

// AddAllowFrom adds id to channels.<channel>.allow_from in the config file
// at path and saves it atomically with mode 0600. The file is read without
// environment overrides, so a token given as PERCH_… stays out of it. An id
// already listed is not added twice.
func AddAllowFrom(path, channel, id string) error {
	allowMu.Lock()
	defer allowMu.Unlock()
	noEnv := func(string) (string, bool) { return "", false }
	c, err := Load(Options{Path: path, Env: noEnv})
	if err != nil {
		if errors.Is(err, ErrNoConfig) {
			return fmt.Errorf("config: no config file at %s to add channels.%s.allow_from to; create it with 'perch onboard'", path, channel)
		}
		return err
	}
	if err := c.Channels.addAllowFrom(channel, id); err != nil {
		return err
	}
	return c.Save()
}

// addAllowFrom appends id to the allow_from of platform name.
func (c *Channels) addAllowFrom(name, id string) error {
	sec, ok := c.Section(name)
	if !ok {
		return fmt.Errorf("config: there is no channels.%s section", name)
	}
	v := reflect.ValueOf(sec.Settings).Elem()
	for i := 0; i < v.NumField(); i++ {
		if jsonName(v.Type().Field(i)) != "allow_from" {
			continue
		}
		f := v.Field(i)
		for _, e := range f.Interface().([]string) {
			if e == id {
				return nil
			}
		}
		f.Set(reflect.Append(f, reflect.ValueOf(id)))
		return nil
	}
	return fmt.Errorf("config: channels.%s has no allow_from", name)
}
