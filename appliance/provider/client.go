package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/sashabaranov/go-openai"

	"github.com/perchhq/perch/appliance/config"
)

// Usage counts tokens of one call.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	TotalTokens      int
}

// Request is one chat-completions call.
type Request struct {
	Messages []openai.ChatCompletionMessage
	// Tools are offered with tool_choice "auto" unless the model is known
	// to reject them.
	Tools []openai.Tool
	// ToolsJSON, when set, is Tools already encoded as a JSON array (the
	// registry caches it: the definitions are the same every turn).
	ToolsJSON []byte
}

// Response is the model's answer.
type Response struct {
	Content      string
	ToolCalls    []openai.ToolCall
	Usage        Usage
	FinishReason string
	// ToolsDropped is set when the model rejected tool definitions and the
	// call was repeated without them.
	ToolsDropped bool
}

// Client calls one provider.
type Client struct {
	name        string
	choice      Choice
	key         string
	base        string
	oa          *openai.Client
	tr          *transport
	maxTokens   int
	temperature float64
	fallbacks   []string
	imageModel  string
	log         *slog.Logger

	noTools sync.Map // model -> true: learned at run time
}

// New builds the client for cfg's default model (see Select). An error
// wrapping ErrNoProvider means nothing usable is configured (the gateway
// starts degraded); any other error means the configured provider cannot be
// created (exit 1).
func New(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Client, error) {
	choice, err := Select(cfg)
	if err != nil {
		return nil, err
	}
	return NewNamed(ctx, cfg, choice, log)
}

// NewNamed builds a client for choice.Name with choice.Model (which may be
// empty for listing models).
func NewNamed(ctx context.Context, cfg *config.Config, choice Choice, log *slog.Logger) (*Client, error) {
	if log == nil {
		log = slog.Default()
	}
	p, ok := cfg.Provider(choice.Name)
	if !ok {
		return nil, fmt.Errorf("provider: unknown provider %q; use one of %s", choice.Name, strings.Join(config.ProviderNames, ", "))
	}
	base := strings.TrimRight(p.APIBase, "/")
	if base == "" {
		def, _ := config.Default().Provider(choice.Name)
		base = strings.TrimRight(def.APIBase, "/")
	}
	if err := checkBase(base); err != nil {
		return nil, fmt.Errorf("provider: providers.%s.api_base: %w", choice.Name, err)
	}
	hc, err := newHTTPClient(p.Proxy)
	if err != nil {
		return nil, fmt.Errorf("provider: providers.%s.proxy: %w", choice.Name, err)
	}
	tr := &transport{client: hc, policy: defaultPolicy(p.MaxRetries), log: log.With("provider", choice.Name)}
	if choice.Name == "gemini" && (p.AuthMethod == "gcloud-adc" || p.AuthMethod == "adc") {
		ts, err := adcTokenSource(ctx)
		if err != nil {
			return nil, fmt.Errorf("provider: providers.gemini.auth_method %s: %w", p.AuthMethod, err)
		}
		tr.tokens = ts
	}
	oc := openai.DefaultConfig(p.APIKey.Value())
	oc.BaseURL = base
	oc.HTTPClient = tr
	d := cfg.Agents.Defaults
	c := &Client{
		name:        choice.Name,
		choice:      choice,
		key:         p.APIKey.Value(),
		base:        base,
		oa:          openai.NewClientWithConfig(oc),
		tr:          tr,
		maxTokens:   d.MaxTokens,
		temperature: d.Temperature,
		imageModel:  cfg.Tools.Image.Model,
		log:         log,
	}
	if choice.Name == "openrouter" {
		c.fallbacks = d.FallbackModels
	}
	return c, nil
}

// Name is the provider's name.
func (c *Client) Name() string { return c.name }

// Model is the configured model name.
func (c *Client) Model() string { return c.choice.Configured }

// APIBase is the endpoint in use.
func (c *Client) APIBase() string { return c.base }

// Chat sends one chat-completions request.
func (c *Client) Chat(ctx context.Context, r Request) (*Response, error) {
	model := c.choice.Model
	tools := r.Tools
	if _, no := c.noTools.Load(model); no {
		tools = nil
	}
	resp, err := c.chat(ctx, model, r.Messages, tools, r.ToolsJSON)
	if err != nil {
		var pe *Error
		if errors.As(err, &pe) && pe.Kind == KindNoTools && len(tools) > 0 {
			c.noTools.Store(model, true)
			c.log.Warn("model rejects tool definitions; using it without tools from now on", "provider", c.name, "model", model)
			resp, err = c.chat(ctx, model, r.Messages, nil, nil)
			if resp != nil {
				resp.ToolsDropped = true
			}
		}
	}
	return resp, err
}

func (c *Client) chat(ctx context.Context, model string, msgs []openai.ChatCompletionMessage, tools []openai.Tool, toolsJSON []byte) (*Response, error) {
	b := chatBody{model: model}
	if len(tools) > 0 {
		b.toolsJSON = toolsJSON
		if b.toolsJSON == nil {
			var err error
			if b.toolsJSON, err = json.Marshal(tools); err != nil {
				return nil, fmt.Errorf("provider: encode tools: %w", err)
			}
		}
	}
	if isReasoningModel(model) {
		// These families reject max_tokens and any temperature.
		b.maxCompletionTokens = c.maxTokens
	} else {
		b.maxTokens = c.maxTokens
		t := c.temperature
		b.temperature = &t
	}
	if len(c.fallbacks) > 0 {
		b.route = "fallback"
		b.models = append([]string{model}, c.fallbacks...)
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= 1<<20 { // don't pin a huge buffer
			bufPool.Put(buf)
		}
	}()
	if err := encodeChat(buf, b, msgs); err != nil {
		return nil, fmt.Errorf("provider: encode request: %w", err)
	}
	st := &callState{}
	out, err := c.postChat(withState(ctx, st), buf.Bytes())
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var pe *Error
		if errors.As(err, &pe) {
			return nil, pe
		}
		return nil, c.classify(err, c.choice.Configured, int(st.retries.Load()))
	}
	if len(out.Choices) == 0 {
		return nil, &Error{Kind: KindUpstream, Provider: c.name, Model: c.choice.Configured, Message: "the response has no choices"}
	}
	ch := out.Choices[0]
	return &Response{
		Content:      ch.Message.Content,
		ToolCalls:    ch.Message.ToolCalls,
		FinishReason: string(ch.FinishReason),
		Usage: Usage{
			PromptTokens:     out.Usage.PromptTokens,
			CompletionTokens: out.Usage.CompletionTokens,
			TotalTokens:      out.Usage.TotalTokens,
		},
	}, nil
}
