package tools

import (
	"context"
	"fmt"
	"strings"

	"github.com/perchhq/perch/appliance/api"
)

// Canvas node types and actions: what the page knows how to draw.
var (
	canvasActions = []string{"create_node", "update_node", "delete_node", "clear"}
	canvasTypes   = []string{"text", "code", "image", "video"}
)

// NewCanvas returns the canvas tool. It changes nothing on the machine: each
// call becomes a UI command returned beside the reply (the /chat response's
// ui_commands), which the web page draws.
func NewCanvas() Tool {
	return Func{
		ToolName: "canvas",
		ToolDescription: "Show content on the user's canvas in the web page: create, update or delete a node, or clear the canvas. " +
			"Nodes are text, code, image (URL or data URI) or video (URL). create_node answers with the node_id to use for later updates.",
		Params: Object(map[string]*Property{
			"action":  String("What to do.", canvasActions...),
			"type":    String("Node type for create_node (default text) or update_node.", canvasTypes...),
			"node_id": String("The node to update or delete; optional for create_node (one is assigned)."),
			"title":   String("Title shown on the node."),
			"content": String("The node's content: text, source code, or an image or video URL."),
			"x":       Number("Left edge, in canvas pixels."),
			"y":       Number("Top edge, in canvas pixels."),
			"width":   {Type: "number", Description: "Width in pixels.", Minimum: Bound(0)},
			"height":  {Type: "number", Description: "Height in pixels.", Minimum: Bound(0)},
		}, "action"),
		Run: runCanvas,
	}
}

func runCanvas(_ context.Context, args Args) Result {
	cmd := api.UICommand{
		Command: "canvas",
		Action:  args.String("action"),
		NodeID:  strings.TrimSpace(args.String("node_id")),
		Type:    args.String("type"),
		Title:   args.String("title"),
		Content: args.String("content"),
	}
	for name, dst := range map[string]**float64{"x": &cmd.X, "y": &cmd.Y, "width": &cmd.Width, "height": &cmd.Height} {
		if args.Has(name) {
			v := args.Float(name, 0)
			*dst = &v
		}
	}
	var note string
	switch cmd.Action {
	case "create_node":
		if cmd.Type == "" {
			cmd.Type = "text"
		}
		if cmd.NodeID == "" {
			cmd.NodeID = "n-" + randomHex(4)
		}
		note = fmt.Sprintf("canvas: created %s node node_id=%q", cmd.Type, cmd.NodeID)
	case "update_node":
		if cmd.NodeID == "" {
			return Errorf("canvas: update_node needs node_id; use the id create_node answered with")
		}
		if cmd.Type == "" && cmd.Title == "" && cmd.Content == "" && cmd.X == nil && cmd.Y == nil && cmd.Width == nil && cmd.Height == nil {
			return Errorf("canvas: update_node of %q changes nothing; give the fields to change (title, content, type, x, y, width, height)", cmd.NodeID)
		}
		note = fmt.Sprintf("canvas: updated node_id=%q", cmd.NodeID)
	case "delete_node":
		if cmd.NodeID == "" {
			return Errorf("canvas: delete_node needs node_id; use the id create_node answered with")
		}
		// Only the id matters to the page.
		cmd = api.UICommand{Command: "canvas", Action: "delete_node", NodeID: cmd.NodeID}
		note = fmt.Sprintf("canvas: deleted node_id=%q", cmd.NodeID)
	case "clear":
		cmd = api.UICommand{Command: "canvas", Action: "clear"}
		note = "canvas: cleared"
	}
	return Result{Kind: KindBasic, ForLLM: note, UI: []api.UICommand{cmd}}
}
