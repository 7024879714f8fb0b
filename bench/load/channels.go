package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/perchhq/perch/appliance/channel/discord/discordtest"
	"github.com/perchhq/perch/appliance/channel/line/linetest"
	"github.com/perchhq/perch/appliance/channel/slack/slacktest"
	"github.com/perchhq/perch/appliance/channel/telegram/telegramtest"
)

// mosquitto is Debian's broker; without it the MQTT link is left out of
// the measure (and the output says so).
const mosquitto = "/usr/sbin/mosquitto"

// channelFigures is the idle memory of a gateway with every chat channel
// connected (to loopback fakes of the platforms, in this process) and the
// MQTT link up: what a board running all of them holds between turns.
type channelFigures struct {
	warmKB, trimmedKB int
	warmAnonKB        int
	mqtt              bool
	// Over the longIdle after the trimmed reading (0 without it), and its
	// last reading: the idle trim gives back the binary's pages only after
	// two quiet minutes where they are mapped page by page.
	longMeanKB, longMaxKB, longLastKB int
}

// longIdle is -longidle: how long the every-channel measure goes on reading
// the RSS after its trimmed reading. Idle work (polls, MQTT states, Go's
// forced collection every two minutes) maps pages again, so one reading
// just after the trim says little about a board that idles for hours.
var longIdle time.Duration

// sampleRSS reads s's VmRSS every second for d and returns the mean, the
// largest and the last reading.
func sampleRSS(s *server, d time.Duration) (meanKB, maxKB, lastKB int) {
	n, sum := 0, 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		lastKB = s.rssKB("VmRSS")
		sum, n, maxKB = sum+lastKB, n+1, max(maxKB, lastKB)
	}
	if n == 0 {
		return 0, 0, 0
	}
	return sum / n, maxKB, lastKB
}

// String is the figures in words, as both outputs print them.
func (f channelFigures) String() string {
	mb := func(kb int) string { return fmt.Sprintf("%.1f MB", float64(kb)/1024) }
	out := fmt.Sprintf("%s warm (%s anonymous, %s file), %s trimmed", mb(f.warmKB), mb(f.warmAnonKB), mb(f.warmKB-f.warmAnonKB), mb(f.trimmedKB))
	if f.longMaxKB > 0 {
		out += fmt.Sprintf(", then %s mean and %s at most over %s of idling, %s at its end", mb(f.longMeanKB), mb(f.longMaxKB), longIdle.Round(time.Second), mb(f.longLastKB))
	}
	return out
}

// measureChannels starts bin with Telegram, Slack, Discord, LINE and MQTT
// enabled, gives each chat platform one message and /chat one turn, and
// reads the RSS after settle (warm) and after idleWait (trimmed).
func measureChannels(client *http.Client, bin, providerBase string, settle, idleWait time.Duration) (channelFigures, error) {
	var f channelFigures
	home, err := os.MkdirTemp("", "perch-load-channels-*")
	if err != nil {
		return f, err
	}
	defer os.RemoveAll(home)
	tg := telegramtest.New("123456:bench-telegram-token")
	defer tg.Close()
	sl := slacktest.New()
	defer sl.Close()
	dc := discordtest.New()
	defer dc.Close()
	ln := linetest.New("bench-line-access-token", "bench-line-channel-secret")
	defer ln.Close()

	port := freePort()
	cfg := map[string]any{
		"gateway":   map[string]any{"host": "127.0.0.1", "port": port, "api_token": "bench-token-0123456789abcdef"},
		"providers": map[string]any{"openrouter": map[string]any{"api_key": "k", "api_base": providerBase}},
		"agents":    map[string]any{"defaults": map[string]any{"model": "openai/gpt-4o-mini"}},
		"channels": map[string]any{
			"telegram": map[string]any{"enabled": true, "token": tg.Token, "api_base": tg.Base(), "allow_all_tools": true},
			"slack":    map[string]any{"enabled": true, "bot_token": sl.BotToken, "app_token": sl.AppToken, "api_base": sl.APIBase(), "allow_all_tools": true},
			"discord":  map[string]any{"enabled": true, "token": dc.Token, "api_base": dc.APIBase(), "allow_all_tools": true},
			"line": map[string]any{"enabled": true, "channel_secret": "bench-line-channel-secret", "channel_access_token": "bench-line-access-token",
				"webhook_port": port, "api_base": ln.Base(), "data_api_base": ln.Base(), "allow_all_tools": true},
		},
	}
	if _, err := os.Stat(mosquitto); err == nil {
		stop, url, err := startBroker(home)
		if err != nil {
			return f, err
		}
		defer stop()
		cfg["mqtt"] = map[string]any{"enabled": true, "broker": url, "client_id": "perch-bench", "topic_prefix": "perch/bench"}
		f.mqtt = true
	}
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(home, "config.json"), data, 0o600); err != nil {
		return f, err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	s, err := launch(client, []string{bin, "gateway"}, []string{"PERCH_HOME=" + home}, url, "bench-token-0123456789abcdef")
	if err != nil {
		return f, fmt.Errorf("perch with every channel: %w", err)
	}
	defer s.stop()

	// The same order as the gateway alone: idle after start, then turns.
	time.Sleep(settle)
	diagnose(s, "channels-started")
	// Warm: a turn through /chat and one through each platform that
	// delivers messages to the board.
	if _, _, err := load(client, s, 1, 1); err != nil {
		return f, err
	}
	tg.Add(telegramtest.Message{From: telegramtest.User{ID: 1, FirstName: "Ann", Username: "ann"}, Text: "hello"})
	sl.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "hello"})
	dc.Post(discordtest.Message{ChannelID: "700", Author: discordtest.User{ID: "111", Username: "ann"}, Content: "hello"})
	if len(tg.WaitSent(1, 20*time.Second)) < 1 || len(sl.WaitPosted(1, 20*time.Second)) < 1 || len(dc.WaitSent(1, 20*time.Second)) < 1 {
		return f, fmt.Errorf("perch with every channel: a platform's message was not answered")
	}
	time.Sleep(settle)
	f.warmKB = s.rssKB("VmRSS")
	f.warmAnonKB = s.rssKB("RssAnon")
	diagnose(s, "channels-warm")
	time.Sleep(idleWait)
	f.trimmedKB = s.rssKB("VmRSS")
	diagnose(s, "channels-trimmed")
	if longIdle > 0 {
		f.longMeanKB, f.longMaxKB, f.longLastKB = sampleRSS(s, longIdle)
		diagnose(s, "channels-long-idle")
	}
	diagQuit(s)
	return f, nil
}

// runChannels is -only channels: the every-channel measure alone, against
// its own instant fake provider, for quick rounds while working on it.
func runChannels(w io.Writer, bin string, settle, idleWait time.Duration) error {
	if err := writeBack(bin); err != nil {
		return err
	}
	base, stopFake := fakeProvider()
	defer stopFake()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxIdleConns: 64}}
	f, err := measureChannels(client, bin, base, settle, idleWait)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "idle RSS, every chat channel (mqtt %v): %s\n", f.mqtt, f)
	return nil
}

// startBroker runs mosquitto on a free loopback port with a config of its
// own, as the MQTT tests do.
func startBroker(dir string) (stop func(), url string, err error) {
	port := freePort()
	conf := filepath.Join(dir, "mosquitto.conf")
	body := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n", port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, "", err
	}
	cmd := exec.Command(mosquitto, "-c", conf)
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return stop, "mqtt://" + addr, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, "", fmt.Errorf("mosquitto did not listen on %s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
