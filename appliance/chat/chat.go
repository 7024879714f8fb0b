// Package chat holds the conversation types that the store persists, the
// provider puts on the wire, the tools describe themselves with and the
// agent passes between them. It is a leaf: it imports only the standard
// library, so every layer can use it without depending on another.
//
// # Concepts
//
// A conversation is a list of Message values in the chat-completions shape:
// a user message, the assistant's answer (which may ask for tools through
// ToolCalls), one tool message per call carrying its result (ToolCallID
// names the call), and so on. Usage counts the tokens a provider billed.
// ToolDef is what the model is told about one tool.
package chat

import (
	"bytes"
	"encoding/json"
)

// Roles of a Message.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one entry of a conversation, in the chat-completions shape.
// The JSON tags are the stored format: changing one needs a store migration.
type Message struct {
	Role       string     `json:"role"` // system, user, assistant, tool
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
	// Time is Unix milliseconds; zero when unknown.
	Time int64 `json:"t,omitempty"`
}

// ToolCall is a model's request to run a tool.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // a JSON object, as the model wrote it
}

// Usage counts tokens reported by the provider.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Add returns u + o.
func (u Usage) Add(o Usage) Usage {
	return Usage{u.PromptTokens + o.PromptTokens, u.CompletionTokens + o.CompletionTokens, u.TotalTokens + o.TotalTokens}
}

// IsZero reports whether nothing was counted.
func (u Usage) IsZero() bool { return u == Usage{} }

// ToolDef is a tool as offered to the model: its name, when to use it, and
// a JSON Schema of its parameters.
type ToolDef struct {
	Name        string
	Description string
	Parameters  json.RawMessage // a JSON Schema object
}

// MarshalJSON writes d as an element of the chat-completions "tools" array,
// which every OpenAI-compatible provider accepts:
// {"type":"function","function":{"name":…,"description":…,"parameters":…}}.
func (d ToolDef) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"type":"function","function":{"name":`)
	if err := writeJSON(&b, d.Name); err != nil {
		return nil, err
	}
	b.WriteString(`,"description":`)
	if err := writeJSON(&b, d.Description); err != nil {
		return nil, err
	}
	if len(d.Parameters) > 0 {
		b.WriteString(`,"parameters":`)
		if err := json.Compact(&b, d.Parameters); err != nil {
			return nil, err
		}
	}
	b.WriteString(`}}`)
	return b.Bytes(), nil
}

// UnmarshalJSON reads the chat-completions "tools" element MarshalJSON
// writes.
func (d *ToolDef) UnmarshalJSON(data []byte) error {
	var w struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*d = ToolDef{Name: w.Function.Name, Description: w.Function.Description, Parameters: w.Function.Parameters}
	return nil
}

func writeJSON(b *bytes.Buffer, v any) error {
	out, err := json.Marshal(v)
	b.Write(out)
	return err
}
