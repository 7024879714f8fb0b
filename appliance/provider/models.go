package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/perchhq/perch/appliance/config"
)

// MatchModels returns the models whose id contains filter, ignoring case;
// all of them when filter is empty.
func MatchModels(models []Model, filter string) []Model {
	if filter == "" {
		return models
	}
	f := strings.ToLower(filter)
	var out []Model
	for _, m := range models {
		if strings.Contains(strings.ToLower(m.ID), f) {
			out = append(out, m)
		}
	}
	return out
}

// Model is one entry of the provider's model list.
type Model struct {
	ID      string            `json:"id"`
	Pricing map[string]string `json:"pricing,omitempty"`
}

// Models lists the provider's models: GET {api_base}/models.
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	req, err := http.NewRequestWithContext(withState(ctx, &callState{}), http.MethodGet, c.base+"/models", nil)
	if err != nil {
		return nil, err
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.tr.Do(req)
	if err != nil {
		return nil, &Error{Kind: KindUnreachable, Provider: c.name, Message: c.scrub(err.Error())}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, &Error{Kind: KindUnreachable, Provider: c.name, Message: c.scrub(err.Error())}
	}
	if resp.StatusCode != http.StatusOK {
		var apiErr struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		json.Unmarshal(body, &apiErr)
		msg := apiErr.Error.Message
		if msg == "" {
			msg = string(body)
		}
		e := &Error{Provider: c.name, Status: resp.StatusCode, Message: c.scrub(msg)}
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			e.Kind = KindAuth
		case http.StatusTooManyRequests:
			e.Kind = KindRateLimit
		case http.StatusPaymentRequired:
			e.Kind = KindCredits
		}
		return nil, e
	}
	var list struct {
		Data []struct {
			ID      string         `json:"id"`
			Pricing map[string]any `json:"pricing"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, &Error{Kind: KindUpstream, Provider: c.name, Status: resp.StatusCode,
			Message: fmt.Sprintf("the model list is not JSON: %v", err)}
	}
	out := make([]Model, 0, len(list.Data))
	for _, m := range list.Data {
		mod := Model{ID: m.ID}
		if len(m.Pricing) > 0 {
			mod.Pricing = map[string]string{}
			for k, v := range m.Pricing {
				// OpenRouter sends prices as strings; others as numbers.
				mod.Pricing[k] = fmt.Sprint(v)
			}
		}
		out = append(out, mod)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func checkBase(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("malformed URL %q: %v", config.ShowURL(base), config.ParseProblem(base, err))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("malformed URL %q: want http(s)://host/path", config.ShowURL(base))
	}
	if err := config.StrayAt(base, u); err != nil {
		return fmt.Errorf("malformed URL %w", err)
	}
	return nil
}
