package tools

import (
	"context"
	"errors"
	"testing"

	"github.com/perchhq/perch/appliance/bus"
)

func TestMessage(t *testing.T) {
	tests := []struct {
		name    string
		call    Call
		args    map[string]any
		want    bus.Outbound
		wantLLM string
		wantErr string
	}{
		{name: "current chat by default", call: Call{Channel: "telegram", ChatID: "42"},
			args: map[string]any{"content": "hi"}, want: bus.Outbound{Channel: "telegram", ChatID: "42", Text: "hi"},
			wantLLM: "message sent to telegram:42"},
		{name: "explicit target", call: Call{Channel: "telegram", ChatID: "42"},
			args: map[string]any{"content": "hi", "channel": "slack", "chat_id": "C7"}, want: bus.Outbound{Channel: "slack", ChatID: "C7", Text: "hi"},
			wantLLM: "message sent to slack:C7"},
		{name: "same channel, current chat", call: Call{Channel: "discord", ChatID: "9"},
			args: map[string]any{"content": "x", "channel": "discord"}, want: bus.Outbound{Channel: "discord", ChatID: "9", Text: "x"},
			wantLLM: "message sent to discord:9"},
		{name: "chat on the current channel", call: Call{Channel: "telegram", ChatID: "42"},
			args: map[string]any{"content": "x", "chat_id": "43"}, want: bus.Outbound{Channel: "telegram", ChatID: "43", Text: "x"},
			wantLLM: "message sent to telegram:43"},
		{name: "internal channel is logged", call: Call{Channel: "cli"},
			args: map[string]any{"content": "note"}, want: bus.Outbound{Channel: "cli", Text: "note"},
			wantLLM: "message logged on the internal channel cli; no chat platform received it"},
		{name: "other channel needs a chat", call: Call{Channel: "telegram", ChatID: "42"},
			args:    map[string]any{"content": "x", "channel": "slack"},
			wantErr: "message: chat_id is required to send on slack from a conversation on telegram"},
		{name: "no target at all", call: Call{},
			args:    map[string]any{"content": "x"},
			wantErr: "message: no channel to send to: this conversation has none, so give channel and chat_id"},
		{name: "empty content", call: Call{Channel: "telegram", ChatID: "42"},
			args: map[string]any{"content": " \n"}, wantErr: "content is empty"},
		{name: "content required", call: Call{Channel: "telegram", ChatID: "42"},
			args: map[string]any{}, wantErr: `missing required argument "content"`},
		// The dispatcher would drop it while the model said it was sent.
		{name: "a channel that does not run", call: Call{Channel: "telegram", ChatID: "42"},
			args:    map[string]any{"content": "x", "channel": "line", "chat_id": "U1"},
			wantErr: "message: no line channel runs on this board, so nobody would receive it; channels that deliver: discord, slack, telegram, web"},
		// Named first: asking for a chat id sent the model after the wrong argument.
		{name: "a channel that does not run, without a chat", call: Call{Channel: "telegram", ChatID: "42"},
			args:    map[string]any{"content": "x", "channel": "nosuch"},
			wantErr: "message: no nosuch channel runs on this board"},
		// A chat nobody can open was reported sent.
		{name: "a chat the channel refuses", call: Call{Channel: "telegram", ChatID: "42"},
			args:    map[string]any{"content": "x", "channel": "web", "chat_id": "../../etc"},
			wantErr: "message: not sent: not a page chat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bus.New(4)
			r := registryOf(NewMessage(MessageOptions{Send: b.PublishOutbound, Channels: func() []string {
				return []string{"discord", "slack", "telegram", "web"}
			}, CheckChat: func(channel, chat string) error {
				if channel == "web" && chat == "../../etc" {
					return errors.New("not a page chat")
				}
				return nil
			}}))
			res := r.ExecuteWith(context.Background(), "message", tt.args, tt.call)
			if tt.wantErr != "" {
				wantErr(t, res, tt.wantErr)
				if b.OutboundDepth() != 0 {
					t.Error("a refused message was queued")
				}
				return
			}
			if res.Kind != KindSilent || res.ForLLM != tt.wantLLM {
				t.Errorf("result = %v %q, want silent %q", res.Kind, res.ForLLM, tt.wantLLM)
			}
			select {
			case got := <-b.Outbound():
				if got.Channel != tt.want.Channel || got.ChatID != tt.want.ChatID || got.Text != tt.want.Text {
					t.Errorf("queued %+v, want %+v", got, tt.want)
				}
			default:
				t.Fatal("nothing was queued")
			}
		})
	}
}

func TestMessageQueueFullOrClosed(t *testing.T) {
	b := bus.New(1)
	tool := NewMessage(MessageOptions{Send: b.PublishOutbound})
	ctx := WithCall(context.Background(), Call{Channel: "telegram", ChatID: "1"})
	if res := tool.Execute(ctx, Args{"content": "one"}); res.IsError() {
		t.Fatal(res.ForLLM)
	}
	wantErr(t, tool.Execute(ctx, Args{"content": "two"}), "outgoing queue is full", "not sent")
	b.Close()
	res := tool.Execute(ctx, Args{"content": "three"})
	wantErr(t, res, "message: not sent: bus: closed")
	if !errors.Is(res.Err, bus.ErrClosed) {
		t.Errorf("error does not wrap bus.ErrClosed: %v", res.Err)
	}
	wantErr(t, NewMessage(MessageOptions{}).Execute(ctx, Args{"content": "x"}), "sending is not available")
}
