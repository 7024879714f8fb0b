// Package api holds the request and response types of Perch's HTTP API,
// shared by the gateway that serves them, the client that calls them (the
// CLI) and the services behind them. It is a leaf: it imports only the
// standard library.
//
// # Concepts
//
// POST /chat takes a ChatRequest and answers a ChatResponse. The cron jobs
// API (/admin/cron) speaks JobSpec and Job, and Jobs is the one interface
// that both the scheduler (in the gateway's process) and the HTTP client
// (the CLI talking to a running gateway) implement, so the cron tool, the
// CLI and the admin routes are thin adapters over either.
package api

// ChatRequest is the body of POST /chat.
type ChatRequest struct {
	Message    string `json:"message"`
	SessionKey string `json:"session_key,omitempty"`
	// Channel and ChatID are the context tools act in (the chat a reminder
	// is delivered to, say); the reply comes back in the response whatever
	// they are.
	Channel     string       `json:"channel,omitempty"`
	ChatID      string       `json:"chat_id,omitempty"`
	MediaConfig *MediaConfig `json:"media_config,omitempty"`
}

// MediaConfig asks for generated media.
type MediaConfig struct {
	Type        string `json:"type"`
	Size        string `json:"size"`
	AspectRatio string `json:"aspect_ratio"`
}

// ChatResponse is the body of a successful POST /chat.
type ChatResponse struct {
	Response   string      `json:"response"`
	UICommands []UICommand `json:"ui_commands"`
	// T is when the answer was made, in Unix milliseconds on the board's
	// clock: the clock of the chat's stored messages, which a client's own
	// clock may not agree with.
	T int64 `json:"t"`
}

// UICommand is one element of ui_commands: a canvas change the page
// applies.
type UICommand struct {
	Command string   `json:"command"`
	Action  string   `json:"action"`
	NodeID  string   `json:"node_id"`
	Type    string   `json:"type,omitempty"`
	Title   string   `json:"title,omitempty"`
	Content string   `json:"content,omitempty"`
	X       *float64 `json:"x,omitempty"`
	Y       *float64 `json:"y,omitempty"`
	Width   *float64 `json:"width,omitempty"`
	Height  *float64 `json:"height,omitempty"`
}

// Error is the body of every failed request.
type Error struct {
	Error string `json:"error"`
}

// Health is the body of GET /health.
type Health struct {
	Status string `json:"status"`
	Uptime string `json:"uptime,omitempty"`
}
