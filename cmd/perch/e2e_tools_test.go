package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/provider/providertest"
)

// TestChatFileToolsChain: the model writes a file, reads it back, edits it
// and tries to leave the workspace; each result reaches it on the next
// call, and the file on disk is the edited one.
func TestChatFileToolsChain(t *testing.T) {
	h := NewHome(t, nil)
	h.Fake.Enqueue(
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "w", Name: "write_file",
			Args: `{"path":"notes/plan.md","content":"# Plan\n- buy a BME280\n- wire it to I2C\n"}`}}},
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "r", Name: "read_file", Args: `{"path":"notes/plan.md"}`}}},
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "e", Name: "edit_file",
			Args: `{"path":"notes/plan.md","old_text":"- buy a BME280","new_text":"- buy a BME280 (done)"}`}}},
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "x", Name: "read_file", Args: `{"path":"../config.json"}`}}},
		providertest.Reply{Content: "Your plan is saved in notes/plan.md."},
	)
	g := h.Start()
	if got := g.MustChat("e2e:files", "make me a plan"); got != "Your plan is saved in notes/plan.md." {
		t.Fatalf("reply %q", got)
	}
	reqs := h.Fake.Requests()
	if len(reqs) != 5 {
		t.Fatalf("%d provider calls, want 5", len(reqs))
	}
	for i, want := range []string{
		"wrote 39 bytes to notes/plan.md",
		"# Plan\n- buy a BME280\n- wire it to I2C\n",
		"edited notes/plan.md: replaced 1 occurrence (39 bytes before, 46 after)",
	} {
		if got := providertest.LastTool(reqs[i+1].Body); got != want {
			t.Errorf("tool result %d the model saw: %q, want %q", i+1, got, want)
		}
	}
	refusal := providertest.LastTool(reqs[4].Body)
	if !strings.Contains(refusal, `"../config.json" is outside the workspace`) || !strings.Contains(refusal, "restrict_to_workspace") {
		t.Errorf("escape attempt answered %q", refusal)
	}
	if strings.Contains(refusal, "sk-or-e2e-secret") {
		t.Error("the config file's key reached the model")
	}
	data, err := os.ReadFile(filepath.Join(h.Workspace(), "notes", "plan.md"))
	if err != nil || string(data) != "# Plan\n- buy a BME280 (done)\n- wire it to I2C\n" {
		t.Errorf("file on disk: %q, %v", data, err)
	}
	if strings.Contains(g.Stderr(), "BME280") {
		t.Error("a tool argument reached the log")
	}
}

// TestChatCanvasAndImageReachUICommands: canvas calls and a generated
// image come back as ui_commands; the model sees only a short note.
func TestChatCanvasAndImageReachUICommands(t *testing.T) {
	h := NewHome(t, nil)
	h.Fake.Enqueue(
		providertest.Reply{ToolCalls: []providertest.ToolCall{
			{ID: "c", Name: "canvas", Args: `{"action":"create_node","type":"code","title":"main.go","content":"package main","x":10,"y":0}`},
			{ID: "i", Name: "generate_image", Args: `{"prompt":"a robin","aspect_ratio":"16:9"}`},
		}},
		providertest.Reply{Content: "Done."},
	)
	g := h.Start()
	status, body := g.Chat("e2e:canvas", "show me")
	if status != 200 || body["response"] != "Done." {
		t.Fatalf("HTTP %d %v", status, body)
	}
	ui, _ := body["ui_commands"].([]any)
	if len(ui) != 2 {
		t.Fatalf("ui_commands = %v", body["ui_commands"])
	}
	code := ui[0].(map[string]any)
	if code["command"] != "canvas" || code["action"] != "create_node" || code["type"] != "code" ||
		code["title"] != "main.go" || code["content"] != "package main" || code["x"] != 10.0 || code["y"] != 0.0 {
		t.Errorf("canvas command %v", code)
	}
	if id, _ := code["node_id"].(string); !strings.HasPrefix(id, "n-") {
		t.Errorf("node_id %q not assigned", id)
	}
	img := ui[1].(map[string]any)
	if img["type"] != "image" || img["content"] != "data:image/png;base64,iVBORw0KGgo=" {
		t.Errorf("image command %v", img)
	}
	note := providertest.LastTool(h.Fake.Requests()[1].Body)
	// The fake's image is a bare PNG signature: its size unread, the
	// one asked for is said.
	if !strings.HasPrefix(note, "generated an image/png image (8 bytes; 1024x576 was asked for)") || strings.Contains(note, "iVBOR") {
		t.Errorf("the model saw %q", note)
	}
}
