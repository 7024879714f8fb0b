package tools

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

func TestCanvas(t *testing.T) {
	tests := []struct {
		name    string
		args    string
		wantUI  string // JSON of the one UI command; "{ID}" stands for an assigned id
		wantLLM string
		wantErr string
	}{
		{name: "create with everything",
			args:    `{"action":"create_node","type":"code","node_id":"n1","title":"main.go","content":"package main","x":10,"y":0,"width":300,"height":200.5}`,
			wantUI:  `{"command":"canvas","action":"create_node","node_id":"n1","type":"code","title":"main.go","content":"package main","x":10,"y":0,"width":300,"height":200.5}`,
			wantLLM: `canvas: created code node node_id="n1"`},
		{name: "create assigns id and text type",
			args:    `{"action":"create_node","content":"hello"}`,
			wantUI:  `{"command":"canvas","action":"create_node","node_id":"{ID}","type":"text","content":"hello"}`,
			wantLLM: `canvas: created text node node_id="{ID}"`},
		{name: "create image",
			args:   `{"action":"create_node","type":"image","content":"https://example.com/a.png"}`,
			wantUI: `{"command":"canvas","action":"create_node","node_id":"{ID}","type":"image","content":"https://example.com/a.png"}`},
		{name: "update some fields",
			args:    `{"action":"update_node","node_id":"n1","title":"renamed","x":5}`,
			wantUI:  `{"command":"canvas","action":"update_node","node_id":"n1","title":"renamed","x":5}`,
			wantLLM: `canvas: updated node_id="n1"`},
		{name: "delete keeps only the id",
			args:    `{"action":"delete_node","node_id":"n1","title":"ignored"}`,
			wantUI:  `{"command":"canvas","action":"delete_node","node_id":"n1"}`,
			wantLLM: `canvas: deleted node_id="n1"`},
		{name: "clear",
			args:    `{"action":"clear","node_id":"ignored"}`,
			wantUI:  `{"command":"canvas","action":"clear","node_id":""}`,
			wantLLM: "canvas: cleared"},
		{name: "update needs node_id", args: `{"action":"update_node","title":"x"}`, wantErr: "update_node needs node_id"},
		{name: "update needs a change", args: `{"action":"update_node","node_id":"n1"}`, wantErr: `update_node of "n1" changes nothing`},
		{name: "delete needs node_id", args: `{"action":"delete_node"}`, wantErr: "delete_node needs node_id"},
		{name: "unknown action", args: `{"action":"move_node"}`, wantErr: `"action" must be one of "create_node", "update_node", "delete_node", "clear", got "move_node"`},
		{name: "unknown type", args: `{"action":"create_node","type":"audio"}`, wantErr: `"type" must be one of "text", "code", "image", "video"`},
		{name: "negative width", args: `{"action":"create_node","width":-1}`, wantErr: `"width" must be at least 0`},
		{name: "action required", args: `{}`, wantErr: `missing required argument "action"`},
	}
	idPattern := regexp.MustCompile(`^n-[0-9a-f]{8}$`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := registryOf(NewCanvas())
			res := r.Execute(context.Background(), "canvas", tt.args)
			if tt.wantErr != "" {
				wantErr(t, res, tt.wantErr)
				if len(res.UI) != 0 {
					t.Error("a refused call produced a UI command")
				}
				return
			}
			wantOK(t, res)
			if len(res.UI) != 1 {
				t.Fatalf("UI = %+v, want one command", res.UI)
			}
			id := res.UI[0].NodeID
			if strings.Contains(tt.wantUI, "{ID}") && !idPattern.MatchString(id) {
				t.Errorf("assigned node_id %q is not a short random id", id)
			}
			got, _ := json.Marshal(res.UI[0])
			if want := strings.ReplaceAll(tt.wantUI, "{ID}", id); string(got) != want {
				t.Errorf("UI command\n got %s\nwant %s", got, want)
			}
			if tt.wantLLM != "" && res.ForLLM != strings.ReplaceAll(tt.wantLLM, "{ID}", id) {
				t.Errorf("ForLLM = %q", res.ForLLM)
			}
		})
	}
}

func TestCanvasAssignsDistinctIDs(t *testing.T) {
	tool := NewCanvas()
	seen := map[string]bool{}
	for range 100 {
		id := tool.Execute(context.Background(), Args{"action": "create_node"}).UI[0].NodeID
		if seen[id] {
			t.Fatalf("node_id %s assigned twice", id)
		}
		seen[id] = true
	}
}
