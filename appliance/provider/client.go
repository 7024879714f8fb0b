package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/sashabaranov/go-openai"

	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/appliance/config"
)

// Request is one chat-completions call: the system prompt, then the stored
// history, then the current turn's messages.
type Request struct {
	// The system prompt is SystemHead followed by System. SystemHead is
	// the part that stays the same from turn to turn (the workspace files,
	// the tool summaries): the client keeps its encoding while it is the
	// same string.
	SystemHead string
	System     string
	History    []chat.Message
	Messages   []chat.Message
	// Tools are offered with tool_choice "auto" unless the model is known
	// to reject them.
	Tools []chat.ToolDef
	// ToolsJSON, when set, is Tools already encoded as a JSON array (the
	// registry caches it: the definitions are the same every turn).
	ToolsJSON []byte
	// HistoryKey, when set, names the conversation History belongs to:
	// the client keeps History's encoding, and the next call with the same
	// key copies whatever part of it is unchanged instead of encoding it
	// again. Messages of a History passed with a key must never be changed
	// in place (the store's histories never are).
	HistoryKey string
}

// Response is the model's answer.
type Response struct {
	Content      string
	ToolCalls    []chat.ToolCall
	Usage        chat.Usage
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
	auth        string // the Authorization header: "Bearer " and key, or empty
	base        string
	chatURL     string
	oa          *openai.Client
	tr          *transport
	maxTokens   int
	temperature float64
	fallbacks   []string
	imageModel  string
	log         *slog.Logger
	secrets     []string // the key and the config's other secrets, for scrub

	noTools sync.Map // model -> true: learned at run time
	wire    *wireCache
}

// Options configure a Client. OptionsFor builds them from the config.
type Options struct {
	// Choice is the provider and model (see Select).
	Choice Choice
	// Settings are providers.<name> of the config; an empty APIBase means
	// the provider's default.
	Settings config.Provider
	// MaxTokens and Temperature go with every chat request.
	MaxTokens   int
	Temperature float64
	// Fallbacks are the aggregator's fallback models.
	Fallbacks []string
	// ImageModel is the model for /images/generations.
	ImageModel string
	Log        *slog.Logger
	// Secrets are the config's other secrets (channel tokens, the API
	// token), scrubbed from the provider's error text like its own key.
	Secrets []string
}

// OptionsFor returns the options for choice as cfg configures them.
func OptionsFor(cfg *config.Config, choice Choice, log *slog.Logger) (Options, error) {
	p, ok := cfg.Provider(choice.Name)
	if !ok {
		return Options{}, fmt.Errorf("provider: unknown provider %q; use one of %s", choice.Name, strings.Join(config.ProviderNames, ", "))
	}
	d := cfg.Agents.Defaults
	o := Options{Choice: choice, Settings: *p, MaxTokens: d.MaxTokens, Temperature: d.Temperature,
		ImageModel: cfg.Tools.Image.Model, Log: log, Secrets: cfg.SecretValues()}
	if choice.Name == "openrouter" {
		o.Fallbacks = d.FallbackModels
	}
	return o, nil
}

// FromConfig builds the client for cfg's default model (see Select). An
// error wrapping ErrNoProvider means nothing usable is configured (the
// gateway starts degraded); any other error means the configured provider
// cannot be created (exit 1).
func FromConfig(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Client, error) {
	choice, err := Select(cfg)
	if err != nil {
		return nil, err
	}
	o, err := OptionsFor(cfg, choice, log)
	if err != nil {
		return nil, err
	}
	return New(ctx, o)
}

// New builds a client for o.Choice (whose model may be empty for listing
// models).
func New(ctx context.Context, o Options) (*Client, error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	choice, p := o.Choice, o.Settings
	if _, ok := config.Default().Provider(choice.Name); !ok {
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
	tr := &transport{client: hc, h1: newH1Transport(hc.Transport.(*http.Transport)), policy: defaultPolicy(p.MaxRetries), log: log.With("provider", choice.Name)}
	if choice.Name == "gemini" && (p.AuthMethod == "gcloud-adc" || p.AuthMethod == "adc") {
		ts, err := adcTokenSource(hc)
		if err != nil {
			return nil, fmt.Errorf("provider: providers.gemini.auth_method %s: %w", p.AuthMethod, err)
		}
		tr.tokens = ts
	}
	auth := ""
	if k := p.APIKey.Value(); k != "" {
		auth = "Bearer " + k
	}
	oc := openai.DefaultConfig(p.APIKey.Value())
	oc.BaseURL = base
	oc.HTTPClient = tr
	return &Client{
		name:        choice.Name,
		choice:      choice,
		key:         p.APIKey.Value(),
		secrets:     append([]string{p.APIKey.Value(), config.URLSecret(p.Proxy), config.URLSecret(p.APIBase)}, o.Secrets...),
		auth:        auth,
		base:        base,
		chatURL:     base + "/chat/completions",
		oa:          openai.NewClientWithConfig(oc),
		tr:          tr,
		maxTokens:   o.MaxTokens,
		temperature: o.Temperature,
		fallbacks:   o.Fallbacks,
		imageModel:  o.ImageModel,
		log:         log,
		wire:        newWireCache(),
	}, nil
}

// Name is the provider's name.
func (c *Client) Name() string { return c.name }

// Model is the configured model name.
func (c *Client) Model() string { return c.choice.Configured }

// APIBase is the endpoint in use.
func (c *Client) APIBase() string { return c.base }

// DropCache gives back what the client keeps for busy times, for a board
// gone idle: the encoded conversations kept between calls (the next call of
// each encodes its history again), and the idle connections beyond the two
// most recently used (the next burst of parallel turns dials again).
func (c *Client) DropCache() {
	c.wire.drop()
	if c.tr != nil && c.tr.h1 != nil {
		c.tr.h1.keepIdle(idleKeptWhenQuiet)
	}
}

// idleKeptWhenQuiet is how many idle connections to the provider a quiet
// board keeps: the next turn, and a second that overlaps it, reuse them.
const idleKeptWhenQuiet = 2

// Chat sends one chat-completions request.
func (c *Client) Chat(ctx context.Context, r Request) (*Response, error) {
	model := c.choice.Model
	tools := r.Tools
	if _, no := c.noTools.Load(model); no {
		tools = nil
	}
	resp, err := c.chat(ctx, model, r, tools, r.ToolsJSON)
	if err != nil {
		var pe *Error
		if errors.As(err, &pe) && pe.Kind == KindNoTools && len(tools) > 0 {
			c.noTools.Store(model, true)
			c.log.Warn("model rejects tool definitions; using it without tools from now on", "provider", c.name, "model", model)
			resp, err = c.chat(ctx, model, r, nil, nil)
			if resp != nil {
				resp.ToolsDropped = true
			}
		}
	}
	return resp, err
}

func (c *Client) chat(ctx context.Context, model string, r Request, tools []chat.ToolDef, toolsJSON []byte) (*Response, error) {
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
	bp := bodyPool.Get().(*[]byte)
	body := encodeChatWith((*bp)[:0], b, r, c.wire)
	defer func() {
		if cap(body) <= maxPooled {
			*bp = body[:0]
			bodyPool.Put(bp)
		}
	}()
	st := &callState{}
	out, err := c.postChat(withState(ctx, st), body)
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
	var calls []chat.ToolCall
	if n := len(ch.Message.ToolCalls); n > 0 {
		calls = make([]chat.ToolCall, n)
		for i, tc := range ch.Message.ToolCalls {
			calls[i] = chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
		}
	}
	return &Response{
		Content:      string(ch.Message.Content),
		ToolCalls:    calls,
		FinishReason: string(ch.FinishReason),
		Usage: chat.Usage{
			PromptTokens:     int64(out.Usage.PromptTokens),
			CompletionTokens: int64(out.Usage.CompletionTokens),
			TotalTokens:      int64(out.Usage.TotalTokens),
		},
	}, nil
}
