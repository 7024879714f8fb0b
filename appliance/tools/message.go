package tools

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/perchhq/perch/appliance/bus"
)

// MessageOptions configures the message tool.
type MessageOptions struct {
	// Send queues a message for the dispatcher; in the gateway it is the
	// bus's PublishOutbound.
	Send func(bus.Outbound) error
	// Channels, when set, lists the channels that deliver (the running
	// chat platforms and the web page): a message for any other would be
	// dropped by the dispatcher while the model reported it sent.
	Channels func() []string
	// CheckChat, when set, vets a chat id for its channel (a page chat's
	// form): a message to a chat nobody can open was reported sent.
	CheckChat func(channel, chatID string) error
}

// NewMessage returns the message tool, which sends text to a chat: the
// current one unless the model names another.
func NewMessage(opts MessageOptions) Tool {
	m := &message{send: opts.Send, channels: opts.Channels, checkChat: opts.CheckChat}
	return Func{
		ToolName: "message",
		ToolDescription: "Send a message to a chat. Without channel and chat_id it goes to the current conversation; " +
			"use it to tell the user something before a long task finishes, or to reach another chat. " +
			"Your normal reply is sent anyway: do not repeat it with this tool.",
		Params: Object(map[string]*Property{
			"content": String("The text to send."),
			"channel": String("Channel to send on (telegram, slack, discord, line); default: the current one."),
			"chat_id": String("Chat to send to on that channel; default: the current chat."),
		}, "content"),
		Run: m.run,
		// Messages to other chats could speak for the owner.
		MutatingCall: func(ctx context.Context, a Args) bool {
			return otherChat(CallFrom(ctx), a.String("channel"), a.String("chat_id"))
		},
	}
}

type message struct {
	send      func(bus.Outbound) error
	channels  func() []string
	checkChat func(channel, chatID string) error
}

func (m *message) run(ctx context.Context, args Args) Result {
	content := args.String("content")
	if strings.TrimSpace(content) == "" {
		return Errorf("message: content is empty; give the text to send")
	}
	if m.send == nil {
		return Errorf("message: sending is not available in this process")
	}
	call := CallFrom(ctx)
	channel, chatID := args.String("channel"), args.String("chat_id")
	switch {
	case channel == "" && chatID == "":
		channel, chatID = call.Channel, call.ChatID
	case channel == "":
		channel = call.Channel
	case chatID == "" && channel == call.Channel:
		chatID = call.ChatID
	}
	if channel == "" {
		return Errorf("message: no channel to send to: this conversation has none, so give channel and chat_id")
	}
	internal := bus.IsInternal(channel)
	// A channel that does not run is the first thing to fix: asking for a
	// chat id first sent the model after the wrong argument.
	if m.channels != nil && !internal {
		if names := m.channels(); !slices.Contains(names, channel) {
			list := "none"
			if len(names) > 0 {
				list = strings.Join(names, ", ")
			}
			return Errorf("message: no %s channel runs on this board, so nobody would receive it; channels that deliver: %s", channel, list)
		}
	}
	if chatID == "" && !internal {
		return Errorf("message: chat_id is required to send on %s from a conversation on %s", channel, orNone(call.Channel))
	}
	if m.checkChat != nil && !internal {
		if err := m.checkChat(channel, chatID); err != nil {
			return Errorf("message: not sent: %v", err)
		}
	}
	err := m.send(bus.Outbound{Channel: channel, ChatID: chatID, Text: content})
	switch {
	case errors.Is(err, bus.ErrFull):
		return Errorf("message: the outgoing queue is full; the message was not sent, try again shortly")
	case err != nil:
		return Errorf("message: not sent: %w", err)
	}
	if internal {
		// The dispatcher only logs internal channels: say
		// so, or the model believes a person read it.
		return Silent(fmt.Sprintf("message logged on the internal channel %s; no chat platform received it", channel))
	}
	return Silent(fmt.Sprintf("message sent to %s:%s", channel, chatID))
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
