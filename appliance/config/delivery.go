package config

import "sort"

// WebChannel is the web page's channel: always there, since the gateway
// always serves the page.
const WebChannel = "web"

// DeliveryChannels names the channels a job may deliver to when the
// gateway runs with this config: the web page, every platform enabled with
// its credentials, and mqtt when enabled. The running gateway asks its
// channel manager instead (a platform this build lacks is missing there);
// this is the answer for when no gateway runs (perch cron add).
func (c *Config) DeliveryChannels() []string {
	out := []string{WebChannel}
	for _, s := range c.Channels.Sections() {
		if s.Ready() {
			out = append(out, s.Name)
		}
	}
	if c.MQTT.Enabled {
		out = append(out, "mqtt")
	}
	sort.Strings(out)
	return out
}
