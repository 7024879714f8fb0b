package config

import "path/filepath"

// Fresh returns the configuration a new installation starts from, bound to
// path and not yet saved: the defaults, the gateway on 0.0.0.0 behind a new
// random api_token (reachable from the LAN and protected), and USB device
// events on. Onboard writes it; an image's first boot writes it too, on the
// board, so no two boards share a token.
func Fresh(path string) *Config {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	cfg := Default()
	cfg.path, cfg.dir = path, Dir()
	cfg.Gateway.Host = "0.0.0.0"
	cfg.Gateway.APIToken = Secret(NewToken())
	// An appliance watches its USB ports out of the box.
	cfg.Devices = Devices{Enabled: true, MonitorUSB: true}
	return cfg
}
