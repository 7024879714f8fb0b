// Package config loads, validates and writes Perch's configuration.
//
// # Concepts
//
// The config is one JSON file, {config_dir}/config.json, where config_dir is
// $PERCH_HOME or ~/.perch (--config moves only the file); on a board set up
// by the package, without either, the service's /etc/perch/config.json and
// /var/lib/perch. Loading starts from
// Default, decodes the file over it (so an absent key keeps its default),
// rejects unknown keys by their full path, applies environment overrides
// (PERCH_<PATH> for every key, then each provider's conventional variable such
// as OPENAI_API_KEY when its key is still empty), and validates once. Every
// error names the key to fix.
//
// Secrets are of type Secret, which never prints its value.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/perchhq/perch/drivers/sensor"
)

// Config is the whole configuration.
type Config struct {
	Agents    Agents    `json:"agents"`
	Providers Providers `json:"providers"`
	Gateway   Gateway   `json:"gateway"`
	Channels  Channels  `json:"channels"`
	Heartbeat Heartbeat `json:"heartbeat"`
	Devices   Devices   `json:"devices"`
	Tools     Tools     `json:"tools"`
	Sensors   Sensors   `json:"sensors"`
	MQTT      MQTT      `json:"mqtt"`

	// Where the config came from and where state lives; not part of the file.
	path     string
	dir      string
	warnings []string
}

// Agents holds agent settings.
type Agents struct {
	Defaults AgentDefaults `json:"defaults"`
}

// AgentDefaults are the agent loop's settings.
type AgentDefaults struct {
	Workspace           string   `json:"workspace"`
	Provider            string   `json:"provider"`
	Model               string   `json:"model"`
	MaxTokens           int      `json:"max_tokens"`
	Temperature         float64  `json:"temperature"`
	MaxToolIterations   int      `json:"max_tool_iterations"`
	MaxConcurrentTurns  int      `json:"max_concurrent_turns"`
	MaxQueuedTurns      int      `json:"max_queued_turns"`
	TurnTimeoutSeconds  int      `json:"turn_timeout_seconds"`
	HistoryLimit        int      `json:"history_limit"`
	SessionTTLDays      int      `json:"session_ttl_days"` // idle sessions older than this are deleted; 0 keeps them
	RestrictToWorkspace bool     `json:"restrict_to_workspace"`
	Timezone            string   `json:"timezone"`
	FallbackModels      []string `json:"fallback_models"`
}

// Provider is one upstream language-model provider.
type Provider struct {
	APIKey  Secret `json:"api_key"`
	APIBase string `json:"api_base"`
	Proxy   string `json:"proxy"`
	// AuthMethod applies to gemini: api_key (default), gcloud-adc or adc.
	AuthMethod string `json:"auth_method,omitempty"`
	MaxRetries int    `json:"max_retries"`
}

// Providers are the seven supported providers.
type Providers struct {
	OpenAI     Provider `json:"openai"`
	OpenRouter Provider `json:"openrouter"`
	Anthropic  Provider `json:"anthropic"`
	Gemini     Provider `json:"gemini"`
	Groq       Provider `json:"groq"`
	DeepSeek   Provider `json:"deepseek"`
	Ollama     Provider `json:"ollama"`
}

// Gateway is the HTTP server.
type Gateway struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	APIToken Secret `json:"api_token"`
	// AllowedHosts are names (or addresses) the board may be reached by
	// besides its own (loopback, gateway.host, its hostname and
	// <hostname>.local, its addresses): a reverse proxy's or a DNS name.
	// Requests whose Host names anything else are refused (DNS rebinding).
	AllowedHosts []string `json:"allowed_hosts"`
}

// Channels are the chat platforms.
type Channels struct {
	Telegram BotChannel   `json:"telegram"`
	Discord  BotChannel   `json:"discord"`
	Slack    SlackChannel `json:"slack"`
	LINE     LINEChannel  `json:"line"`
}

// BotChannel is a platform reached with one bot token.
type BotChannel struct {
	Enabled       bool     `json:"enabled"`
	Token         Secret   `json:"token"`
	AllowFrom     []string `json:"allow_from"`
	AllowAllTools bool     `json:"allow_all_tools"`
	APIBase       string   `json:"api_base"`
	// MaxMediaMB caps a received attachment (photo, voice, video).
	MaxMediaMB int `json:"max_media_mb"`
}

// SlackChannel is Slack in Socket Mode.
type SlackChannel struct {
	Enabled       bool     `json:"enabled"`
	BotToken      Secret   `json:"bot_token"`
	AppToken      Secret   `json:"app_token"`
	AllowFrom     []string `json:"allow_from"`
	AllowAllTools bool     `json:"allow_all_tools"`
	APIBase       string   `json:"api_base"`
	MaxMediaMB    int      `json:"max_media_mb"`
}

// LINEChannel is the webhook-style channel.
type LINEChannel struct {
	Enabled            bool     `json:"enabled"`
	ChannelSecret      Secret   `json:"channel_secret"`
	ChannelAccessToken Secret   `json:"channel_access_token"`
	WebhookHost        string   `json:"webhook_host"`
	WebhookPort        int      `json:"webhook_port"`
	WebhookPath        string   `json:"webhook_path"`
	AllowFrom          []string `json:"allow_from"`
	AllowAllTools      bool     `json:"allow_all_tools"`
	APIBase            string   `json:"api_base"`
	DataAPIBase        string   `json:"data_api_base"`
	MaxMediaMB         int      `json:"max_media_mb"`
}

// Heartbeat is the periodic agent prompt.
type Heartbeat struct {
	Enabled bool `json:"enabled"`
	// Interval is in milliseconds.
	Interval int `json:"interval"`
}

// Devices is the USB device event service.
type Devices struct {
	Enabled    bool `json:"enabled"`
	MonitorUSB bool `json:"monitor_usb"`
}

// Tools configures individual tools.
type Tools struct {
	Exec  ExecTool  `json:"exec"`
	Web   WebTools  `json:"web"`
	Image ImageTool `json:"image"`
}

// ImageTool configures generate_image, served by the chat provider's
// /images/generations endpoint.
type ImageTool struct {
	Model string `json:"model"`
}

// ExecTool configures the shell tool.
type ExecTool struct {
	TimeoutSeconds int  `json:"timeout_seconds"`
	RequireSandbox bool `json:"require_sandbox"`
	// User is who commands run as when the gateway runs as root: a user
	// name or a numeric uid (an unprivileged gateway's commands run as
	// its own user).
	User string `json:"user"`
}

// WebTools configures web_search and web_fetch.
type WebTools struct {
	Search WebSearch `json:"search"`
	Fetch  WebFetch  `json:"fetch"`
}

// WebSearch configures web_search: a keyed API when APIKey is set, else
// keyless scraping of an HTML results page.
type WebSearch struct {
	APIKey   Secret `json:"api_key"`
	APIBase  string `json:"api_base"`
	HTMLBase string `json:"html_base"`
}

// WebFetch configures web_fetch.
type WebFetch struct {
	AllowPrivate bool `json:"allow_private"`
}

// Default returns the configuration used for absent keys.
func Default() *Config {
	p := func(base string) Provider { return Provider{APIBase: base, MaxRetries: 3} }
	return &Config{
		Agents: Agents{Defaults: AgentDefaults{
			MaxTokens:           8192,
			Temperature:         0.7,
			MaxToolIterations:   20,
			MaxConcurrentTurns:  16,
			MaxQueuedTurns:      64,
			TurnTimeoutSeconds:  300,
			HistoryLimit:        200,
			SessionTTLDays:      90,
			RestrictToWorkspace: true,
			FallbackModels:      []string{},
		}},
		Providers: Providers{
			OpenAI:     p("https://api.openai.com/v1"),
			OpenRouter: p("https://openrouter.ai/api/v1"),
			Anthropic:  p("https://api.anthropic.com/v1"),
			Gemini:     p("https://generativelanguage.googleapis.com/v1beta/openai"),
			Groq:       p("https://api.groq.com/openai/v1"),
			DeepSeek:   p("https://api.deepseek.com/v1"),
			Ollama:     p("http://127.0.0.1:11434/v1"),
		},
		Gateway: Gateway{Host: "127.0.0.1", Port: 8080, AllowedHosts: []string{}},
		Channels: Channels{
			Telegram: BotChannel{APIBase: "https://api.telegram.org", AllowFrom: []string{}, MaxMediaMB: 20},
			Discord:  BotChannel{APIBase: "https://discord.com/api/v10", AllowFrom: []string{}, MaxMediaMB: 20},
			Slack:    SlackChannel{APIBase: "https://slack.com/api/", AllowFrom: []string{}, MaxMediaMB: 20},
			LINE: LINEChannel{
				WebhookHost: "0.0.0.0",
				WebhookPort: 8080,
				WebhookPath: "/webhook/line",
				AllowFrom:   []string{},
				APIBase:     "https://api.line.me",
				DataAPIBase: "https://api-data.line.me",
				MaxMediaMB:  20,
			},
		},
		Heartbeat: Heartbeat{Interval: 300000},
		Tools: Tools{
			Exec: ExecTool{TimeoutSeconds: 60, User: "nobody"},
			Web: WebTools{Search: WebSearch{
				APIBase:  "https://api.search.brave.com/res/v1",
				HTMLBase: "https://html.duckduckgo.com",
			}},
			Image: ImageTool{Model: "gpt-image-1"},
		},
		Sensors: Sensors{SampleSeconds: DefaultSampleSeconds, Parts: []sensor.Spec{}},
		MQTT:    MQTT{DiscoveryPrefix: "homeassistant", PublishIntervalSeconds: 60},
	}
}

// Where the .deb and the image put the service's config and home.
var (
	PackageConfig = "/etc/perch/config.json"
	PackageHome   = "/var/lib/perch"
)

// Dir is the config directory: $PERCH_HOME; else ~/.perch when it holds a
// config; else, on a board where the package installed Perch, the
// service's home (so `sudo perch cron list` lists the service's jobs);
// else ~/.perch.
func Dir() string {
	d, _ := locate()
	return d
}

// DefaultPath is the config file that goes with Dir: {Dir}/config.json,
// or the package's /etc/perch/config.json.
func DefaultPath() string {
	_, p := locate()
	return p
}

func locate() (dir, path string) {
	if d := os.Getenv("PERCH_HOME"); d != "" {
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		return d, filepath.Join(d, "config.json")
	}
	dir = ".perch"
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		dir = filepath.Join(home, ".perch")
	}
	path = filepath.Join(dir, "config.json")
	if _, err := os.Stat(path); err != nil && Packaged() {
		return PackageHome, PackageConfig
	}
	return dir, path
}

// Packaged reports whether the package's config is on this machine. A user
// who may not look into /etc/perch (it is the service's, mode 0700) is
// told so when the config is read, rather than sent to an empty ~/.perch.
func Packaged() bool {
	_, err := os.Stat(PackageConfig)
	return err == nil || errors.Is(err, fs.ErrPermission)
}

// Path is the file the config was loaded from (or would be written to).
func (c *Config) Path() string { return c.path }

// Dir is the config directory that holds the database and the workspace.
func (c *Config) Dir() string { return c.dir }

// DBPath is the bbolt database file.
func (c *Config) DBPath() string { return filepath.Join(c.dir, "perch.db") }

// PIDPath is the running gateway's {pid, addr} file.
func (c *Config) PIDPath() string { return filepath.Join(c.dir, "perch.pid") }

// WorkspaceDir is the agent's workspace.
func (c *Config) WorkspaceDir() string {
	if w := c.Agents.Defaults.Workspace; w != "" {
		if filepath.IsAbs(w) {
			return w
		}
		return filepath.Join(c.dir, w)
	}
	return filepath.Join(c.dir, "workspace")
}

// ProviderNames lists the providers in a stable order.
var ProviderNames = []string{"openai", "openrouter", "anthropic", "gemini", "groq", "deepseek", "ollama"}

// Provider returns the settings of the provider called name.
func (c *Config) Provider(name string) (*Provider, bool) {
	p := &c.Providers
	switch name {
	case "openai":
		return &p.OpenAI, true
	case "openrouter":
		return &p.OpenRouter, true
	case "anthropic":
		return &p.Anthropic, true
	case "gemini":
		return &p.Gemini, true
	case "groq":
		return &p.Groq, true
	case "deepseek":
		return &p.DeepSeek, true
	case "ollama":
		return &p.Ollama, true
	}
	return nil, false
}

// ConventionalEnv maps providers to the variable read when their key is empty.
var ConventionalEnv = map[string]string{
	"openai":     "OPENAI_API_KEY",
	"openrouter": "OPENROUTER_API_KEY",
	"anthropic":  "ANTHROPIC_API_KEY",
	"gemini":     "GEMINI_API_KEY",
	"groq":       "GROQ_API_KEY",
	"deepseek":   "DEEPSEEK_API_KEY",
}

// Location is the time zone of agents.defaults.timezone, or the system's
// when it is empty. Load validated the name, so only a zone database that
// vanished since can fail here.
func (c *Config) Location() (*time.Location, error) {
	tz := c.Agents.Defaults.Timezone
	if tz == "" {
		return time.Local, nil
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("config: agents.defaults.timezone %q: %w", tz, err)
	}
	return loc, nil
}
