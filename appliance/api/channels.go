package api

import "time"

// Pairing is a chat sender waiting for the owner's approval: GET
// /admin/channels/pairing lists them.
type Pairing struct {
	Code     string `json:"code"`
	Channel  string `json:"channel"`
	SenderID string `json:"sender_id"`
	Username string `json:"username,omitempty"`
	Name     string `json:"name,omitempty"`
	ChatID   string `json:"chat_id"`
	// ThreadID is the thread the code was answered in (a Slack thread),
	// where the welcome goes too.
	ThreadID string    `json:"thread_id,omitempty"`
	Created  time.Time `json:"created"`
}

// ApproveRequest is the body of POST /admin/channels/approve.
type ApproveRequest struct {
	Code string `json:"code"`
}

// Approval is its answer: who was admitted, and the config key that now
// lists them.
type Approval struct {
	Pairing
	Key string `json:"key"`
}
