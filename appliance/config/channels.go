package config

import (
	"reflect"
)

// ChannelSection is one platform's section of the config, seen through
// what every platform shares. The platforms are the fields of Channels:
// adding a platform adds a field there, and every list of channels (start-up,
// /ready, /admin/status, perch status) follows.
type ChannelSection struct {
	// Name is the platform's key under channels (telegram, slack, …).
	Name          string
	Enabled       bool
	AllowFrom     []string
	AllowAllTools bool
	APIBase       string
	// MaxMediaMB caps a received attachment (channels.<p>.max_media_mb).
	MaxMediaMB int
	// Credentials are the secrets the platform needs, by key path.
	Credentials []SecretState
	// Settings is the platform's own section (*BotChannel,
	// *SlackChannel, *LINEChannel), for its package to read.
	Settings any
}

// Ready reports whether the section is enabled with every credential set.
func (s ChannelSection) Ready() bool {
	if !s.Enabled {
		return false
	}
	for _, c := range s.Credentials {
		if !c.Set {
			return false
		}
	}
	return true
}

// Missing lists the credentials that are not set.
func (s ChannelSection) Missing() []string {
	var out []string
	for _, c := range s.Credentials {
		if !c.Set {
			out = append(out, c.Path)
		}
	}
	return out
}

// Sections returns every platform's section in the order of Channels'
// fields.
func (c *Channels) Sections() []ChannelSection {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	var out []ChannelSection
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := jsonName(f)
		if name == "" || name == "-" {
			continue
		}
		out = append(out, section("channels."+name, name, v.Field(i)))
	}
	return out
}

// Section returns the section of platform name, if there is one.
func (c *Channels) Section(name string) (ChannelSection, bool) {
	for _, s := range c.Sections() {
		if s.Name == name {
			return s, true
		}
	}
	return ChannelSection{}, false
}

// section reads the shared fields of a platform struct by their JSON names
// and collects its secrets.
func section(path, name string, v reflect.Value) ChannelSection {
	s := ChannelSection{Name: name, Settings: v.Addr().Interface()}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f, fv := t.Field(i), v.Field(i)
		switch key := jsonName(f); {
		case key == "enabled":
			s.Enabled = fv.Bool()
		case key == "allow_from":
			s.AllowFrom = fv.Interface().([]string)
		case key == "allow_all_tools":
			s.AllowAllTools = fv.Bool()
		case key == "api_base":
			s.APIBase = fv.String()
		case key == "max_media_mb":
			s.MaxMediaMB = int(fv.Int())
		case f.Type == reflect.TypeOf(Secret("")):
			s.Credentials = append(s.Credentials, SecretState{Path: path + "." + key, Set: fv.Interface().(Secret).IsSet()})
		}
	}
	return s
}
