package provider

import (
	"fmt"
	"strings"

	"github.com/perchhq/perch/appliance/config"
)

// aggregatorPrefixes select openrouter: model names that carry a vendor
// prefix are the aggregator's way of naming models of many vendors.
var aggregatorPrefixes = []string{"openrouter/", "anthropic/", "openai/", "google/", "meta-llama/", "deepseek/"}

// Choice is the result of Select.
type Choice struct {
	// Name is the provider (a key of providers in the config).
	Name string
	// Model is the name sent upstream (vendor prefix stripped where the
	// provider wants it stripped).
	Model string
	// Configured is the model as written in the config.
	Configured string
}

// Select picks the provider and upstream model for cfg's default model. It
// returns an error wrapping ErrNoProvider, with the fix, when nothing usable
// is configured; the gateway then starts degraded.
func Select(cfg *config.Config) (Choice, error) {
	d := cfg.Agents.Defaults
	model := strings.TrimSpace(d.Model)
	if d.Provider != "" {
		p, ok := cfg.Provider(d.Provider)
		if !ok {
			return Choice{}, fmt.Errorf("unknown provider %q in agents.defaults.provider; use one of %s", d.Provider, strings.Join(config.ProviderNames, ", "))
		}
		if model == "" {
			return Choice{}, fmt.Errorf("%w: agents.defaults.model is empty; set the model %s should use", ErrNoProvider, d.Provider)
		}
		if !usable(d.Provider, p) {
			return Choice{}, missingKey(d.Provider)
		}
		return Choice{Name: d.Provider, Model: upstreamModel(d.Provider, model), Configured: model}, nil
	}
	if model == "" {
		for _, name := range config.ProviderNames {
			if p, _ := cfg.Provider(name); name != "ollama" && p.APIKey.IsSet() {
				return Choice{}, fmt.Errorf("%w: agents.defaults.model is empty; set the model for %s (e.g. %s)", ErrNoProvider, name, exampleModel(name))
			}
		}
		return Choice{}, noneConfigured()
	}
	has := func(name string) bool { p, _ := cfg.Provider(name); return usable(name, p) }

	// Aggregator vendor prefixes.
	for _, pre := range aggregatorPrefixes {
		if strings.HasPrefix(model, pre) {
			if has("openrouter") {
				return Choice{Name: "openrouter", Model: model, Configured: model}, nil
			}
			// Without an aggregator key, the vendor's own provider can
			// serve its models.
			if own := vendorProvider(strings.TrimSuffix(pre, "/")); own != "" && has(own) {
				return Choice{Name: own, Model: upstreamModel(own, model), Configured: model}, nil
			}
			return Choice{}, missingKey("openrouter")
		}
	}
	// The model names one of our providers: "groq/llama3-8b", "ollama/qwen2".
	if name, rest, ok := strings.Cut(model, "/"); ok {
		if _, known := cfg.Provider(name); known {
			if !has(name) {
				return Choice{}, missingKey(name)
			}
			return Choice{Name: name, Model: upstreamModel(name, rest), Configured: model}, nil
		}
	}
	// The model's family.
	if fam := family(model); fam != "" && has(fam) {
		return Choice{Name: fam, Model: upstreamModel(fam, model), Configured: model}, nil
	}
	if has("openrouter") {
		return Choice{Name: "openrouter", Model: model, Configured: model}, nil
	}
	var keyed []string
	for _, name := range config.ProviderNames {
		if name != "ollama" && has(name) {
			keyed = append(keyed, name)
		}
	}
	if len(keyed) == 1 {
		return Choice{Name: keyed[0], Model: upstreamModel(keyed[0], model), Configured: model}, nil
	}
	if fam := family(model); fam != "" {
		return Choice{}, missingKey(fam)
	}
	if len(keyed) > 1 {
		return Choice{}, fmt.Errorf("%w: model %q could belong to %s; set agents.defaults.provider", ErrNoProvider, model, strings.Join(keyed, " or "))
	}
	return Choice{}, noneConfigured()
}

func usable(name string, p *config.Provider) bool {
	switch {
	case name == "ollama":
		return true // keyless, local
	case name == "gemini" && (p.AuthMethod == "gcloud-adc" || p.AuthMethod == "adc"):
		return true
	}
	return p.APIKey.IsSet()
}

func missingKey(name string) error {
	env := config.ConventionalEnv[name]
	return fmt.Errorf("%w: providers.%s.api_key is not set; set it in the config or export %s (or %s)",
		ErrNoProvider, name, env, config.EnvName("providers."+name+".api_key"))
}

func noneConfigured() error {
	return fmt.Errorf("%w: set providers.openrouter.api_key (or OPENROUTER_API_KEY) and agents.defaults.model, e.g. openai/gpt-4o-mini", ErrNoProvider)
}

func vendorProvider(vendor string) string {
	switch vendor {
	case "openai", "anthropic", "deepseek":
		return vendor
	case "google":
		return "gemini"
	}
	return ""
}

// family guesses a provider from a bare model name.
func family(model string) string {
	m := strings.ToLower(model)
	switch {
	case strings.HasPrefix(m, "gpt") || strings.HasPrefix(m, "chatgpt") || isReasoningModel(m):
		return "openai"
	case strings.HasPrefix(m, "claude"):
		return "anthropic"
	case strings.HasPrefix(m, "gemini"):
		return "gemini"
	case strings.HasPrefix(m, "deepseek"):
		return "deepseek"
	case strings.HasPrefix(m, "llama") || strings.HasPrefix(m, "mixtral") || strings.HasPrefix(m, "gemma") || strings.HasPrefix(m, "whisper"):
		return "groq"
	}
	return ""
}

// upstreamModel strips vendor prefixes the provider itself does not use: the
// cloud-model provider wants "gemini-2.0-flash", not "google/gemini-2.0-flash"
// (the cloud provider rejects prefixed names); direct vendors want their bare names.
func upstreamModel(provider, model string) string {
	switch provider {
	case "openrouter":
		return model
	case "gemini":
		for _, pre := range []string{"gemini/", "google/", "models/"} {
			model = strings.TrimPrefix(model, pre)
		}
		return model
	}
	if name, rest, ok := strings.Cut(model, "/"); ok && (name == provider || vendorProvider(name) == provider) {
		return rest
	}
	return model
}

func exampleModel(provider string) string {
	switch provider {
	case "openai":
		return "gpt-4o-mini"
	case "anthropic":
		return "claude-3-5-haiku-latest"
	case "gemini":
		return "gemini-2.0-flash"
	case "groq":
		return "llama-3.3-70b-versatile"
	case "deepseek":
		return "deepseek-chat"
	}
	return "openai/gpt-4o-mini"
}

// isReasoningModel reports the o1/o3/o4/gpt-5 families, which take
// max_completion_tokens and no temperature.
func isReasoningModel(model string) bool {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	for _, p := range []string{"o1", "o3", "o4", "gpt-5"} {
		if m == p || strings.HasPrefix(m, p+"-") || strings.HasPrefix(m, p+".") {
			return true
		}
	}
	return false
}
