package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Validate checks every value once, at start, and names the key to fix.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	d := &c.Agents.Defaults
	if d.Provider != "" {
		if _, ok := c.Provider(d.Provider); !ok {
			bad("agents.defaults.provider", "unknown provider %q; use one of %s", d.Provider, strings.Join(ProviderNames, ", "))
		}
	}
	if d.MaxTokens < 1 {
		bad("agents.defaults.max_tokens", "must be at least 1, got %d", d.MaxTokens)
	}
	if d.Temperature < 0 || d.Temperature > 2 {
		bad("agents.defaults.temperature", "must be between 0.0 and 2.0, got %v", d.Temperature)
	}
	if d.MaxToolIterations < 1 {
		bad("agents.defaults.max_tool_iterations", "must be at least 1, got %d", d.MaxToolIterations)
	}
	if d.MaxConcurrentTurns < 1 {
		bad("agents.defaults.max_concurrent_turns", "must be at least 1, got %d", d.MaxConcurrentTurns)
	}
	if d.MaxQueuedTurns < 0 {
		bad("agents.defaults.max_queued_turns", "must be 0 or more, got %d", d.MaxQueuedTurns)
	}
	if d.TurnTimeoutSeconds < 1 {
		bad("agents.defaults.turn_timeout_seconds", "must be at least 1, got %d", d.TurnTimeoutSeconds)
	}
	if d.HistoryLimit < 100 {
		bad("agents.defaults.history_limit", "must be at least 100 (the last 100 messages are always kept), got %d", d.HistoryLimit)
	}
	if d.SessionTTLDays < 0 || d.SessionTTLDays > 36500 {
		bad("agents.defaults.session_ttl_days", "must be between 0 (keep sessions forever) and 36500 days, got %d", d.SessionTTLDays)
	}
	if d.Timezone != "" {
		if _, err := time.LoadLocation(d.Timezone); err != nil {
			bad("agents.defaults.timezone", "unknown time zone %q (use an IANA name such as Europe/Berlin; is tzdata installed?)", d.Timezone)
		}
	}
	for i, m := range d.FallbackModels {
		if strings.TrimSpace(m) == "" {
			bad(fmt.Sprintf("agents.defaults.fallback_models[%d]", i), "is empty")
		}
	}

	for _, name := range ProviderNames {
		p, _ := c.Provider(name)
		key := "providers." + name
		if p.APIBase != "" {
			if err := checkURL(p.APIBase); err != nil {
				bad(key+".api_base", "%v", err)
			}
		}
		if p.Proxy != "" {
			if err := checkProxy(p.Proxy); err != nil {
				bad(key+".proxy", "%v", err)
			}
		}
		switch p.AuthMethod {
		case "", "api_key":
		case "gcloud-adc", "adc":
			if name != "gemini" {
				bad(key+".auth_method", "%q applies only to providers.gemini; remove it here", p.AuthMethod)
			}
		default:
			bad(key+".auth_method", "must be api_key, gcloud-adc or adc, got %q", p.AuthMethod)
		}
		if p.MaxRetries < 0 || p.MaxRetries > 10 {
			bad(key+".max_retries", "must be between 0 and 10, got %d", p.MaxRetries)
		}
	}

	if c.Gateway.Port < 0 || c.Gateway.Port > 65535 {
		bad("gateway.port", "must be between 1 and 65535, got %d", c.Gateway.Port)
	}
	if strings.TrimSpace(c.Gateway.Host) == "" {
		bad("gateway.host", "is empty; use 127.0.0.1 for this machine only or 0.0.0.0 for the LAN")
	}
	c.Gateway.validate(bad)

	ch := &c.Channels
	for name, base := range map[string]string{
		"channels.telegram.api_base":  ch.Telegram.APIBase,
		"channels.discord.api_base":   ch.Discord.APIBase,
		"channels.slack.api_base":     ch.Slack.APIBase,
		"channels.line.api_base":      ch.LINE.APIBase,
		"channels.line.data_api_base": ch.LINE.DataAPIBase,
		"tools.web.search.api_base":   c.Tools.Web.Search.APIBase,
		"tools.web.search.html_base":  c.Tools.Web.Search.HTMLBase,
	} {
		if base != "" {
			if err := checkURL(base); err != nil {
				bad(name, "%v", err)
			}
		}
	}
	for _, sec := range ch.Sections() {
		if sec.MaxMediaMB < 1 || sec.MaxMediaMB > 200 {
			bad("channels."+sec.Name+".max_media_mb", "must be between 1 and 200 (megabytes), got %d", sec.MaxMediaMB)
		}
	}
	if ch.LINE.WebhookPort < 1 || ch.LINE.WebhookPort > 65535 {
		bad("channels.line.webhook_port", "must be between 1 and 65535, got %d", ch.LINE.WebhookPort)
	}
	if !strings.HasPrefix(ch.LINE.WebhookPath, "/") {
		bad("channels.line.webhook_path", "must start with /, got %q", ch.LINE.WebhookPath)
	}
	for i, id := range ch.LINE.AllowFrom {
		if len(id) != 33 || id[0] != 'U' {
			bad(fmt.Sprintf("channels.line.allow_from[%d]", i), "LINE user IDs are 33 characters, U followed by 32 hex digits; got %q", id)
		}
	}

	if c.Heartbeat.Interval < 1000 {
		bad("heartbeat.interval", "is in milliseconds and must be at least 1000, got %d", c.Heartbeat.Interval)
	}
	if c.Tools.Exec.TimeoutSeconds < 1 || c.Tools.Exec.TimeoutSeconds > 3600 {
		bad("tools.exec.timeout_seconds", "must be between 1 and 3600, got %d", c.Tools.Exec.TimeoutSeconds)
	}
	if !isUserName(c.Tools.Exec.User) {
		bad("tools.exec.user", "must be a user name or a numeric uid (commands of a root gateway run as it; the default is nobody), got %q", c.Tools.Exec.User)
	}

	errs = append(errs, c.Sensors.validate()...)
	errs = append(errs, c.MQTT.validate()...)
	return errors.Join(errs...)
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("malformed URL %q: %v", ShowURL(s), ParseProblem(s, err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URL %q must start with http:// or https://", ShowURL(s))
	}
	if err := StrayAt(s, u); err != nil {
		return fmt.Errorf("URL %w", err)
	}
	if u.Host == "" {
		return fmt.Errorf("URL %q has no host", ShowURL(s))
	}
	return nil
}

func checkProxy(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("malformed proxy URL %q: %v", ShowURL(s), ParseProblem(s, err))
	}
	switch u.Scheme {
	case "http", "https", "socks5", "socks5h":
	default:
		return fmt.Errorf("proxy URL %q must start with http://, https:// or socks5://", ShowURL(s))
	}
	if err := StrayAt(s, u); err != nil {
		return fmt.Errorf("proxy URL %w", err)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil && u.Hostname() == "" {
		return fmt.Errorf("proxy URL %q has no host", ShowURL(s))
	}
	return nil
}

// IsLoopbackHost reports whether host names this machine only.
func IsLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isUserName accepts what useradd does (letters, digits, '_', '-', '.', a
// trailing '$'; not starting with '-'), or a uid. Whether the user exists
// is checked by the gateway, where it matters: only a root gateway uses it.
func isUserName(s string) bool {
	if s == "" || len(s) > 32 || s[0] == '-' {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '_', r == '-', r == '.':
		case r == '$' && i == len(s)-1:
		default:
			return false
		}
	}
	return true
}
