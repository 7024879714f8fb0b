package provider

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sashabaranov/go-openai"
)

// Kind classifies an upstream failure.
type Kind int

// Failure kinds.
const (
	KindUpstream    Kind = iota // any other status
	KindAuth                    // 401/403: key missing, wrong or revoked
	KindModel                   // unknown model id
	KindRateLimit               // 429 after retries
	KindCredits                 // 402 / insufficient quota
	KindUnreachable             // network failure
	KindNoTools                 // the model rejects tool definitions
	KindBadRequest              // 400 other than the above
	KindContext                 // the request does not fit the model's context window
)

// ErrNoProvider is returned when no provider can be selected; its message
// says which key to set.
var ErrNoProvider = errors.New("no provider configured")

// Error is an upstream failure.
type Error struct {
	Kind     Kind
	Provider string
	Model    string
	Status   int
	Message  string // upstream's own message, scrubbed and shortened
	Retries  int
}

func (e *Error) Error() string {
	p := "provider " + e.Provider
	status := ""
	if e.Status > 0 {
		status = fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	detail := ""
	if e.Message != "" {
		detail = ": " + e.Message
	}
	switch e.Kind {
	case KindAuth:
		if strings.HasPrefix(e.Message, "application default credentials") {
			return fmt.Sprintf("%s: authentication failed: %s", p, e.Message)
		}
		return fmt.Sprintf("%s: authentication failed%s: the API key is missing, wrong or revoked; check providers.%s.api_key%s", p, status, e.Provider, detail)
	case KindModel:
		hint := "check agents.defaults.model"
		if e.Provider == "openrouter" {
			hint = "include the vendor prefix, e.g. openai/gpt-4o-mini or anthropic/claude-3.5-sonnet"
		}
		return fmt.Sprintf("%s: unknown model %q%s: %s%s", p, e.Model, status, hint, detail)
	case KindRateLimit:
		return fmt.Sprintf("%s: rate limited%s%s; wait a moment and try again%s", p, status, afterRetries(e.Retries), detail)
	case KindCredits:
		return fmt.Sprintf("%s: no credits left%s: add credits or raise the quota of the %s account%s", p, status, e.Provider, detail)
	case KindUnreachable:
		return fmt.Sprintf("%s: cannot reach the API%s: %s; check the network and providers.%s.api_base", p, afterRetries(e.Retries), e.Message, e.Provider)
	case KindNoTools:
		return fmt.Sprintf("%s: model %q does not accept tool definitions%s", p, e.Model, detail)
	case KindBadRequest:
		return fmt.Sprintf("%s: request rejected%s%s", p, status, detail)
	case KindContext:
		return fmt.Sprintf("%s: the conversation does not fit model %q's context window%s: start afresh with /new, or choose a model with a larger one%s", p, e.Model, status, detail)
	}
	return fmt.Sprintf("%s: upstream failed%s%s%s", p, status, afterRetries(e.Retries), detail)
}

// afterRetries says how often a failed call was tried again, if at all
// (a model list is asked once).
func afterRetries(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return " after 1 retry"
	}
	return fmt.Sprintf(" after %d retries", n)
}

// classify turns a go-openai error into an *Error.
func (c *Client) classify(err error, model string, retries int) *Error {
	e := &Error{Provider: c.name, Model: model, Retries: retries}
	var api *openai.APIError
	var req *openai.RequestError
	var adc *adcError
	switch {
	case errors.As(err, &adc):
		e.Kind, e.Message = KindAuth, adc.Error()
		return e
	case errors.As(err, &api):
		e.Status = api.HTTPStatusCode
		e.Message = api.Message
		if code, ok := api.Code.(string); ok && e.Message == "" {
			e.Message = code
		}
		if code, ok := api.Code.(string); ok && (code == "model_not_found" || code == "insufficient_quota") {
			e.Message = code + ": " + e.Message
		}
	case errors.As(err, &req):
		e.Status = req.HTTPStatusCode
		e.Message = strings.TrimSpace(string(req.Body))
		if e.Message == "" && req.Err != nil {
			e.Message = req.Err.Error()
		}
	default:
		e.Kind = KindUnreachable
		e.Message = err.Error()
	}
	e.Message = c.scrub(e.Message)
	if e.Kind == KindUnreachable {
		return e
	}
	low := strings.ToLower(e.Message)
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden && strings.Contains(low, "key"):
		e.Kind = KindAuth
	case e.Status == http.StatusPaymentRequired || strings.Contains(low, "insufficient_quota") ||
		strings.Contains(low, "insufficient credits") || strings.Contains(low, "credit balance"):
		e.Kind = KindCredits
	case e.Status == http.StatusTooManyRequests:
		e.Kind = KindRateLimit
	case strings.Contains(low, "model_not_found") || e.Status == http.StatusNotFound ||
		(e.Status == http.StatusBadRequest && strings.Contains(low, "model") &&
			(strings.Contains(low, "not a valid model") || strings.Contains(low, "not found") ||
				strings.Contains(low, "does not exist") || strings.Contains(low, "unknown model") || strings.Contains(low, "invalid model"))):
		e.Kind = KindModel
	case e.Status == http.StatusBadRequest && rejectsTools(low):
		e.Kind = KindNoTools
	case (e.Status == http.StatusBadRequest || e.Status == http.StatusRequestEntityTooLarge || e.Status == http.StatusUnprocessableEntity) && overflows(low):
		e.Kind = KindContext
	case e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity:
		e.Kind = KindBadRequest
	default:
		e.Kind = KindUpstream
	}
	return e
}

// overflows recognises the ways providers say a request is longer than the
// model's context window (OpenAI: "maximum context length is 8192
// tokens", "context_length_exceeded"; Anthropic: "prompt is too long";
// Gemini: "exceeds the maximum number of tokens"; vLLM and llama.cpp:
// "exceeds the available context size").
func overflows(low string) bool {
	for _, s := range []string{"context length", "context_length", "context window", "maximum context",
		"context size", "prompt is too long", "too many tokens", "maximum number of tokens",
		"reduce the length of the messages", "input is too long"} {
		if strings.Contains(low, s) {
			return true
		}
	}
	return false
}

// rejectsTools recognises the ways providers say a model cannot take tool
// definitions (Ollama: "does not support tools"; OpenRouter: "No endpoints
// found that support tool use"; vLLM/llama.cpp variants).
func rejectsTools(low string) bool {
	if !strings.Contains(low, "tool") && !strings.Contains(low, "function") {
		return false
	}
	for _, s := range []string{"does not support tools", "support tool use", "tools are not supported",
		"tool use is not supported", "does not support function", "function calling is not supported",
		"tool calling is not supported", "not support tool"} {
		if strings.Contains(low, s) {
			return true
		}
	}
	return false
}

// scrub removes the API key and the config's other secrets from upstream
// text and bounds its length: a provider may quote what it was sent, and
// what a chat sender typed can hold a token.
func (c *Client) scrub(s string) string {
	for _, k := range c.secrets {
		if len(k) >= 4 {
			s = strings.ReplaceAll(s, k, "[redacted]")
		}
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
