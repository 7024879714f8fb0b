package appliance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/web"
)

// pageSetup is the web page's provider setup (POST /setup): it writes the
// provider into the config file and swaps the agent's provider in place, so
// no restart is needed. The web package guards it (setup code or token) and
// runs one Apply at a time.
type pageSetup struct{ s *System }

// Configured reports whether the agent has a provider.
func (p pageSetup) Configured() bool {
	prov, _ := p.s.Agent.Provider()
	return prov != nil
}

// Apply validates req, saves it in the config file and switches the agent to
// the new provider. The file receives only what the user entered on top of
// what it held (not environment overrides, which stay in the environment);
// the provider is then built from the file as a restart would load it, and a
// file that would not build a provider is rolled back.
func (p pageSetup) Apply(ctx context.Context, req web.SetupRequest) (web.SetupResult, error) {
	name := strings.ToLower(strings.TrimSpace(req.Provider))
	model := strings.TrimSpace(req.Model)
	key := config.Secret(strings.TrimSpace(req.APIKey.Value()))
	base := strings.TrimSpace(req.APIBase)
	live := p.s.Cfg
	if _, ok := live.Provider(name); !ok {
		return web.SetupResult{}, fmt.Errorf("%w: unknown provider %q; choose one of %s", web.ErrBadSetup, req.Provider, strings.Join(config.ProviderNames, ", "))
	}
	if model == "" {
		return web.SetupResult{}, fmt.Errorf("%w: the model is empty; enter the model id %s should use", web.ErrBadSetup, name)
	}
	if name != "ollama" && !key.IsSet() {
		return web.SetupResult{}, fmt.Errorf("%w: the API key is empty; paste the key of your %s account", web.ErrBadSetup, name)
	}

	path := live.Path()
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return web.SetupResult{}, fmt.Errorf("setup: read %s: %w", path, err)
	}
	file, err := fileConfig(live)
	if err != nil {
		return web.SetupResult{}, fmt.Errorf("setup: %w", err)
	}
	file.Agents.Defaults.Provider = name
	file.Agents.Defaults.Model = model
	pc, _ := file.Provider(name)
	if key.IsSet() {
		pc.APIKey = key
	}
	if base != "" {
		pc.APIBase = base
	}
	if err := file.Validate(); err != nil {
		return web.SetupResult{}, fmt.Errorf("%w: %w", web.ErrBadSetup, err)
	}
	if err := file.Save(); err != nil {
		return web.SetupResult{}, fmt.Errorf("setup: %w", err)
	}
	restore := func() {
		if old == nil {
			os.Remove(path)
			return
		}
		if err := config.WriteFileAtomic(path, old, 0o600); err != nil {
			p.s.Log.Error("setup: cannot restore the config file", "path", path, "err", err)
		}
	}
	loaded, err := config.Load(config.Options{Path: path})
	if err != nil {
		restore()
		return web.SetupResult{}, fmt.Errorf("%w: %w", web.ErrBadSetup, err)
	}
	prov, err := provider.FromConfig(ctx, loaded, p.s.Log)
	if err != nil {
		restore()
		return web.SetupResult{}, fmt.Errorf("%w: %w", web.ErrBadSetup, err)
	}
	if err := tryProvider(ctx, prov); err != nil {
		restore()
		return web.SetupResult{}, fmt.Errorf("%w: %s", web.ErrBadSetup, formError(prov, err))
	}
	p.s.Agent.SetProvider(prov, nil)
	return web.SetupResult{Provider: prov.Name(), Model: prov.Model(), Config: path}, nil
}

// tryProvider asks the provider for its model list, a call that costs
// nothing: a wrong key or an address nothing answers at is said at once,
// on the form, instead of "Connected" and a failure at the first message.
// Any other failure (a provider without a model list) lets the setup
// stand.
func tryProvider(ctx context.Context, cl *provider.Client) error {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err := cl.Models(cctx)
	var pe *provider.Error
	if errors.As(err, &pe) && (pe.Kind == provider.KindAuth || pe.Kind == provider.KindUnreachable) {
		return err
	}
	return nil
}

// formError says why the provider's check failed in the words of the
// form in front of the person (its fields, not the config keys behind
// them), and that nothing was saved.
func formError(cl *provider.Client, err error) string {
	var pe *provider.Error
	if !errors.As(err, &pe) {
		return fmt.Sprintf("%s did not answer as expected (%v); nothing was saved", cl.Name(), err)
	}
	why := ""
	if pe.Message != "" {
		why = ": " + pe.Message
	}
	switch pe.Kind {
	case provider.KindAuth:
		return fmt.Sprintf("%s refused the API key%s. Check the API key field (and, for your own server, the API base URL); nothing was saved", cl.Name(), why)
	case provider.KindUnreachable:
		// The network's own words end the message ("connection
		// refused", "no such host"); the URL is said once, in full.
		reason := pe.Message
		if i := strings.LastIndex(reason, ": "); i >= 0 {
			reason = reason[i+2:]
		}
		return fmt.Sprintf("nothing answers at %s (%s). Check the API base URL field, and that the board is online; nothing was saved", config.ShowURL(cl.APIBase()), reason)
	}
	return fmt.Sprintf("%s: %v; nothing was saved", cl.Name(), err)
}

// fileConfig is the config as its file alone says, without environment
// overrides: the base a rewrite must start from. With no file it is the
// built-in defaults, to be saved at live's path.
func fileConfig(live *config.Config) (*config.Config, error) {
	noEnv := func(string) (string, bool) { return "", false }
	c, err := config.Load(config.Options{Path: live.Path(), Env: noEnv})
	if !errors.Is(err, config.ErrNoConfig) {
		return c, err
	}
	// Copy live for its unexported location, then reset every setting.
	fresh := *live
	v, d := reflect.ValueOf(&fresh).Elem(), reflect.ValueOf(config.Default()).Elem()
	for i := range v.NumField() {
		if v.Type().Field(i).IsExported() {
			v.Field(i).Set(d.Field(i))
		}
	}
	return &fresh, nil
}
