package chat

import (
	"encoding/json"
	"testing"
)

// TestToolDefWireShape: providers accept tools only in the chat-completions
// shape, so a ToolDef must encode as exactly that.
func TestToolDefWireShape(t *testing.T) {
	d := ToolDef{Name: "read_file", Description: "Read a <file>.", Parameters: json.RawMessage(`{ "type": "object" }`)}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"function","function":{"name":"read_file","description":"Read a \u003cfile\u003e.","parameters":{"type":"object"}}}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back ToolDef
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Name != d.Name || back.Description != d.Description || string(back.Parameters) != `{"type":"object"}` {
		t.Fatalf("round trip: %+v", back)
	}
}

func TestToolDefWithoutParameters(t *testing.T) {
	b, err := json.Marshal(ToolDef{Name: "x", Description: "y"})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"type":"function","function":{"name":"x","description":"y"}}` {
		t.Fatalf("got %s", b)
	}
}

func TestToolDefRejectsBadSchema(t *testing.T) {
	if _, err := json.Marshal(ToolDef{Name: "x", Parameters: json.RawMessage(`{`)}); err == nil {
		t.Fatal("a broken schema encoded without error")
	}
}

func TestUsageAdd(t *testing.T) {
	got := Usage{1, 2, 3}.Add(Usage{10, 20, 30})
	if got != (Usage{11, 22, 33}) || got.IsZero() || !(Usage{}).IsZero() {
		t.Fatalf("got %+v", got)
	}
}

// TestMessageStoredFormat: the JSON tags are the database format; a renamed
// tag would silently drop fields of every stored conversation.
func TestMessageStoredFormat(t *testing.T) {
	m := Message{Role: RoleAssistant, Content: "c", ToolCalls: []ToolCall{{ID: "1", Name: "n", Arguments: "{}"}}, ToolCallID: "i", Name: "nm", Time: 5}
	b, _ := json.Marshal(m)
	want := `{"role":"assistant","content":"c","tool_calls":[{"id":"1","name":"n","arguments":"{}"}],"tool_call_id":"i","name":"nm","t":5}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}
