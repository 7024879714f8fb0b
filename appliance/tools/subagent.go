package tools

import (
	"context"
	"fmt"
)

// Subagents runs tasks as independent conversations (the agent loop
// implements it).
type Subagents interface {
	// Run executes task and returns the final answer.
	Run(ctx context.Context, task, label string) (string, error)
	// Spawn starts task in the background and returns its id; the
	// requester is notified on completion.
	Spawn(ctx context.Context, task, label string) (string, error)
}

var subagentSchema = Object(map[string]*Property{
	"task":  String("what the subagent should do, stated completely: it sees nothing of this conversation"),
	"label": String("a short name for the task, shown in status lists"),
}, "task")

// NewSubagent returns the subagent tool: a synchronous, independent agent.
func NewSubagent(s Subagents) Tool {
	return Func{
		ToolName: "subagent",
		ToolDescription: "Run a task with an independent agent and wait for its complete answer. " +
			"Use it to keep a long side investigation out of this conversation.",
		Params: subagentSchema,
		Run: func(ctx context.Context, args Args) Result {
			out, err := s.Run(ctx, args.String("task"), args.String("label"))
			if err != nil {
				return Errorf("subagent: %v", err)
			}
			return Text(out)
		},
	}
}

// NewSpawn returns the spawn tool: a background subagent.
func NewSpawn(s Subagents) Tool {
	return Func{
		ToolName: "spawn",
		ToolDescription: "Start a task with an independent agent in the background and return at once. " +
			"The user is told when it finishes. Use it for slow work the user need not wait for.",
		Params: subagentSchema,
		Run: func(ctx context.Context, args Args) Result {
			id, err := s.Spawn(ctx, args.String("task"), args.String("label"))
			if err != nil {
				return Errorf("spawn: %v", err)
			}
			return Async(fmt.Sprintf("Started background task %s. The user will be notified when it finishes; do not wait for it.", id))
		},
	}
}
