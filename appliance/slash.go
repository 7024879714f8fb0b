package appliance

import (
	"context"
	"fmt"
	"strings"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/tools"
)

// registerChatCommands adds the slash commands a chat answers without the
// model, beyond the agent's own.
func (s *System) registerChatCommands() {
	s.Agent.RegisterChatCommand(agent.ChatCommand{Name: "/models", Help: "list the provider's models (/models <filter>)", Run: s.modelsCommand})
	s.Agent.RegisterChatCommand(agent.ChatCommand{Name: "/cron", Help: "list scheduled jobs", Run: func(ctx context.Context, in bus.Inbound, _ string) (string, error) {
		jobs, err := s.Cron.List(ctx)
		if err != nil {
			return "", err
		}
		return tools.ListJobs(jobs, tools.Call{Channel: in.Channel, ChatID: in.ChatID, Restricted: in.RestrictTools}), nil
	}})
	s.Agent.RegisterChatCommand(agent.ChatCommand{Name: "/sensors", Help: "read the configured sensors", Run: func(ctx context.Context, _ bus.Inbound, _ string) (string, error) {
		return tools.SensorsReport(ctx, s.Sensors), nil
	}})
	s.Agent.RegisterChatCommand(agent.ChatCommand{Name: "/devices", Help: "USB devices, I2C buses and SPI devices present", Run: func(context.Context, bus.Inbound, string) (string, error) {
		if s.Devices == nil {
			return tools.DevicesReport(nil, "the device monitor runs only in the gateway"), nil
		}
		_, msg := s.Devices.Check()
		return tools.DevicesReport(s.Devices.Devices(), msg), nil
	}})
}

// client is the provider the agent uses now: the first-run setup may have
// replaced the one built at start.
func (s *System) client() (*provider.Client, error) {
	p, err := s.Agent.Provider()
	if p == nil {
		return nil, err
	}
	cl, ok := p.(*provider.Client)
	if !ok {
		return nil, fmt.Errorf("provider %s cannot list models", p.Name())
	}
	return cl, nil
}

// currentImages generates images with the agent's current provider.
type currentImages struct{ s *System }

func (c currentImages) GenerateImage(ctx context.Context, prompt, size string) (string, string, error) {
	cl, err := c.s.client()
	if err != nil {
		return "", "", err
	}
	return cl.GenerateImage(ctx, prompt, size)
}

func (s *System) modelsCommand(ctx context.Context, _ bus.Inbound, filter string) (string, error) {
	cl, err := s.client()
	if err != nil {
		return "", err
	}
	models, err := cl.Models(ctx)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	n := 0
	for _, m := range provider.MatchModels(models, filter) {
		if n == 50 {
			sb.WriteString("… (narrow it down: /models <filter>)\n")
			break
		}
		sb.WriteString(m.ID)
		if p := m.Pricing; p != nil && (p["prompt"] != "" || p["completion"] != "") {
			fmt.Fprintf(&sb, "  (prompt %s, completion %s per token)", p["prompt"], p["completion"])
		}
		sb.WriteString("\n")
		n++
	}
	if n == 0 {
		return fmt.Sprintf("%s lists no models matching %q.", cl.Name(), filter), nil
	}
	return fmt.Sprintf("Models of %s (in use: %s):\n%s", cl.Name(), cl.Model(), strings.TrimRight(sb.String(), "\n")), nil
}
