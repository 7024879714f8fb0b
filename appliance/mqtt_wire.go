package appliance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/devices"
	"github.com/perchhq/perch/appliance/mqtt"
	"github.com/perchhq/perch/appliance/version"
	"github.com/perchhq/perch/store"
)

// addMQTT builds the link to the MQTT broker when mqtt.enabled is set and
// registers it as the channel "mqtt": the channel manager starts and stops
// it, delivers cron jobs and messages for "mqtt" to it, and reports its
// check as channel:mqtt in /ready. It needs the channels, devices and
// store built. A broker that is away or refuses the login never stops the
// gateway; only a broken setting does (mqtt.ca_file unreadable).
func (s *System) addMQTT() error {
	cfg := s.Cfg
	if !cfg.MQTT.Enabled {
		return nil
	}
	host, _ := os.Hostname()
	link, err := mqtt.New(mqtt.Options{
		Config:        cfg.MQTT,
		CAFile:        cfg.MQTTCAFile(),
		Hostname:      host,
		Version:       version.Get().Version,
		Model:         mqtt.BoardModel(),
		PageURL:       s.pageURL,
		Sensors:       s.Sensors,
		Agent:         s.askOverMQTT,
		OtherSessions: otherSessions(cfg),
		Diagnostics:   s.mqttDiagnostics,
		Memory:        mqttMemory{s.Store},
		Log:           s.Log,
	})
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if cfg.MQTT.AllowAllTools {
		s.Log.Warn("mqtt.allow_all_tools is true: any client of the broker that may publish to the request topic can run commands on this board",
			"topic", link.Status().TopicPrefix+"/agent/request")
	}
	s.MQTT = link
	s.register(link)
	if s.Devices != nil {
		s.Devices.Observe(func(e devices.Event) {
			link.USB(mqtt.DeviceEvent{Connected: e.Connected, Offline: e.Offline, Device: e.Device})
		})
	}
	return nil
}

// otherSessions are the first parts of the session keys that belong to
// conversations held somewhere else than over MQTT: each chat platform's
// (enabled or not: a chat kept from when it was), the page's, the API's
// default, the terminal's, the cron jobs' and the agent's own.
func otherSessions(cfg *config.Config) []string {
	names := []string{"web", "rest", bus.ChannelCLI, "cron", bus.ChannelSystem, bus.ChannelSubagent}
	for _, sec := range cfg.Channels.Sections() {
		names = append(names, sec.Name)
	}
	return names
}

// askOverMQTT runs an MQTT request's turn like a chat message's, telling
// the link when to wait (a full queue) and when to leave the request for
// the next start (shutting down).
func (s *System) askOverMQTT(ctx context.Context, in bus.Inbound) (string, error) {
	rep, err := s.Agent.Process(ctx, in)
	switch {
	case errors.Is(err, agent.ErrBusy):
		return "", fmt.Errorf("%w: %v", mqtt.ErrBusy, err)
	case errors.Is(err, agent.ErrStopped):
		return "", mqtt.ErrStopped
	case err != nil:
		return "", err
	}
	return rep.Text, nil
}

// mqttDiagnostics are the figures Home Assistant shows for the board.
func (s *System) mqttDiagnostics(ctx context.Context) mqtt.Diagnostics {
	d := mqtt.Diagnostics{MemoryMB: rssMiB()}
	if s.HTTP != nil {
		d.Uptime = s.HTTP.Uptime()
		d.Ready = s.HTTP.IsReady()
	}
	if s.Checks != nil {
		results, ok := s.Checks.Run(ctx)
		d.Ready = d.Ready && ok
		var failing []string
		for name, r := range results {
			if r.Status != "ok" {
				failing = append(failing, name+": "+r.Message)
			}
		}
		sort.Strings(failing)
		d.NotReady = strings.Join(failing, "; ")
	}
	if ss, err := s.Store.Sessions(); err == nil {
		d.Sessions = len(ss)
	}
	return d
}

// pageURL is the board's web page as Home Assistant's users can reach it:
// the gateway's host when it names one, else the address the broker
// connection leaves from (or the first LAN address when the broker is on
// this machine); none when the gateway listens on loopback only.
func (s *System) pageURL(local net.IP) string {
	host := s.Cfg.Gateway.Host
	port := strconv.Itoa(s.Cfg.Gateway.Port)
	if s.HTTP != nil {
		if _, p, err := net.SplitHostPort(s.HTTP.Addr()); err == nil {
			port = p
		}
	}
	switch {
	case config.IsLoopbackHost(host):
		return ""
	case host == "" || host == "0.0.0.0" || host == "::":
		if local == nil || local.IsLoopback() {
			local = lanAddress()
		}
		if local == nil {
			return ""
		}
		host = local.String()
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// lanAddress is the first non-loopback unicast address of this machine.
func lanAddress() net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
			return n.IP
		}
	}
	return nil
}

// rssMiB is the process's resident memory.
func rssMiB() float64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return float64(pages*int64(os.Getpagesize())) / (1 << 20)
}

// mqttMemory keeps the link's discovery topics in the store's meta bucket.
type mqttMemory struct{ db *store.DB }

const mqttDiscoveryKey = "mqtt_discovery_topics"

func (m mqttMemory) DiscoveryTopics() ([]string, error) {
	var topics []string
	err := m.db.Get(store.BucketMeta, mqttDiscoveryKey, &topics)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return topics, err
}

func (m mqttMemory) SetDiscoveryTopics(topics []string) error {
	return m.db.Put(store.BucketMeta, mqttDiscoveryKey, topics)
}
