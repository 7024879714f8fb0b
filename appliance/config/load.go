package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/perchhq/perch/drivers/sensor"
)

// ErrNoConfig is returned by Load when an explicitly named config file does
// not exist.
var ErrNoConfig = errors.New("config: file does not exist")

// Options tune Load.
type Options struct {
	// Path is the config file; empty means DefaultPath. When Path is empty
	// and the default file is absent, Load returns the defaults (Absent
	// reports it) so a fresh machine can start; a named file must exist.
	Path string
	// Env looks up environment variables; nil means os.LookupEnv.
	Env func(string) (string, bool)
	// Environ lists the environment, to find PERCH_ variables that name no
	// key, and to skip looking up every key when none is set; nil means
	// os.Environ when Env is nil, else none (and every key is looked up).
	Environ func() []string
}

// Load reads, overrides and validates the configuration.
func Load(opts Options) (*Config, error) {
	env := opts.Env
	if env == nil {
		env = os.LookupEnv
	}
	path, explicit := opts.Path, opts.Path != ""
	if !explicit {
		path = DefaultPath()
	}
	abs, err := filepath.Abs(path)
	if err == nil {
		path = abs
	}
	cfg := Default()
	cfg.path = path
	cfg.dir = Dir()

	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit:
		// Defaults only; the caller says "run perch onboard".
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s (create it with 'perch onboard' or fix --config)", ErrNoConfig, path)
	case errors.Is(err, syscall.ENOTDIR):
		return nil, homeIsAFile(path)
	case errors.Is(err, fs.ErrPermission) && path == PackageConfig:
		return nil, fmt.Errorf("config: %s is the perch service's and this user may not read it; run the command with sudo (it then acts as the perch user)", path)
	case err != nil:
		return nil, fmt.Errorf("config: read %s: %w", path, err)
	default:
		// Editors on other systems (Notepad) may begin a UTF-8 file with
		// a byte-order mark, which JSON does not allow; it says nothing.
		data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
		if err := decode(data, cfg); err != nil {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
	}
	environ := opts.Environ
	if environ == nil && opts.Env == nil {
		environ = os.Environ
	}
	var vars []string
	if environ != nil {
		vars = environ()
	}
	// Looking up every key's variable needs the table of keys, built by
	// reflection over the whole config; most starts set none of them, and
	// the environment's list says so. Without a list, every key is looked up.
	var fromEnv map[string]string
	if environ == nil || namesAKey(vars) {
		if fromEnv, err = applyEnv(cfg, env); err != nil {
			return nil, err
		}
	}
	applyConventionalEnv(cfg, env)
	cfg.warnings = unknownEnv(vars)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, nameEnvKeys(err, fromEnv))
	}
	return cfg, nil
}

// Absent reports whether no config file exists at Path.
func (c *Config) Absent() bool {
	_, err := os.Stat(c.path)
	return errors.Is(err, fs.ErrNotExist)
}

// decode parses data over cfg, rejecting unknown keys (by full path),
// trailing data and mistyped values.
func decode(data []byte, cfg *Config) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("the file is empty; write {} for all defaults or run 'perch onboard --force'")
	}
	var raw any
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&raw); err != nil {
		return syntaxError(data, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the JSON object at %s", position(data, d.InputOffset()))
	}
	if _, ok := raw.(map[string]any); !ok {
		return errors.New("the file must hold a JSON object ({...})")
	}
	if err := checkKeys(raw, reflect.TypeOf(*cfg), ""); err != nil {
		return err
	}
	if err := assign(reflect.ValueOf(cfg).Elem(), raw, ""); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("key %q must be %s, not %s", te.Field, KindName(te.Type), ValueName(te.Value))
		}
		// The file is valid JSON here: a value of no accepted form, such
		// as a sensors value that is neither a list nor an object.
		return err
	}
	return nil
}

// homeIsAFile is the error for a config path under a file: PERCH_HOME (or
// --config's directory, or a directory above it) names a file. It names
// that file, as "not a directory" alone leaves a person looking at the
// wrong path.
func homeIsAFile(path string) error {
	file := filepath.Dir(path)
	for d := file; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil {
			if !fi.IsDir() {
				file = d
			}
			break
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return fmt.Errorf("config: %s is a file, not a directory: the config's directory (PERCH_HOME, ~/.perch or --config's) must be a directory; move that file away or point PERCH_HOME at a directory", file)
}

func syntaxError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at %s: %v", position(data, se.Offset), se)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("invalid JSON: the file ends early (a missing } or ])")
	}
	return fmt.Errorf("invalid JSON: %w", err)
}

func position(data []byte, off int64) string {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - int64(bytes.LastIndexByte(data[:off], '\n'))
	return fmt.Sprintf("line %d, column %d", line, col)
}

// KindName says in JSON's words what a value of Go type t must be ("a
// whole number", "an object"), for errors about JSON a person wrote: the
// config file, and the bodies the HTTP API reads.
func KindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a whole number"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}

// ValueName names the kind of JSON value json.UnmarshalTypeError saw
// ("number", "number 1.5", "string", "array", "object", "bool").
func ValueName(v string) string {
	kind, literal, _ := strings.Cut(v, " ")
	switch kind {
	case "number":
		if literal != "" {
			return literal
		}
		return "a number"
	case "string":
		return "a string"
	case "array":
		return "an array"
	case "object":
		return "an object"
	case "bool":
		return "true or false"
	}
	return v
}

// checkKeys walks raw JSON beside the Go type and reports the first key the
// type does not have, with its full dotted path and the closest known key.
func checkKeys(raw any, t reflect.Type, path string) error {
	if a, ok := raw.([]any); ok && t == sensorsType {
		// The array form of "sensors": its entries are the parts.
		return checkKeys(a, reflect.TypeOf([]sensor.Spec{}), path)
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			return nil // a type error; json.Unmarshal reports it with the path
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			f, ok := fields[k]
			if !ok {
				known := make([]string, 0, len(fields))
				for name := range fields {
					known = append(known, name)
				}
				msg := fmt.Sprintf("unknown key %q", join(path, k))
				if s := Closest(k, known); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", join(path, s))
				} else {
					sort.Strings(known)
					msg += fmt.Sprintf(" (known keys here: %s)", strings.Join(known, ", "))
				}
				return errors.New(msg)
			}
			if err := checkKeys(m[k], f.Type, join(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		a, ok := raw.([]any)
		if !ok {
			return nil
		}
		for i, e := range a {
			if err := checkKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(path, k string) string {
	switch {
	case path == "":
		return k
	case k == "":
		return path
	case k[0] == '[':
		// An index: sensors[0], not sensors.[0].
		return path + k
	}
	return path + "." + k
}

// jsonFields maps JSON names to the exported fields of a struct type.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := jsonName(f)
		if name == "-" {
			continue
		}
		out[name] = f
	}
	return out
}

func jsonName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	name, _, _ := strings.Cut(tag, ",")
	if name == "" {
		return f.Name
	}
	return name
}

// Closest returns the candidate within edit distance 2 of s, if any: the
// "did you mean" of config keys, environment variables and CLI commands.
func Closest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Warnings are what Load noticed but did not refuse: PERCH_ variables that
// name no key (a typo would otherwise be silently ignored).
func (c *Config) Warnings() []string { return c.warnings }

// processEnv are PERCH_ variables that are not config keys.
var processEnv = map[string]bool{"PERCH_HOME": true, "PERCH_SHOW_TOKEN": true}

func unknownEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "PERCH_") || processEnv[name] || leafTable().byEnv[name] {
			continue
		}
		msg := fmt.Sprintf("environment variable %s names no config key; it is ignored", name)
		if c := Closest(name, leafTable().envs); c != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", c)
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

// EnvName is the override variable of a dotted key path.
func EnvName(path string) string {
	return "PERCH_" + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// namesAKey reports whether the environment vars holds a PERCH_ variable
// that may name a key, as opposed to those that set where Perch lives.
func namesAKey(vars []string) bool {
	for _, kv := range vars {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PERCH_") && !processEnv[name] {
			return true
		}
	}
	return false
}

// applyEnv replaces values with PERCH_<PATH> variables. It returns the
// keys it set, each with its variable's name.
func applyEnv(cfg *Config, env func(string) (string, bool)) (map[string]string, error) {
	root := reflect.ValueOf(cfg).Elem()
	var set map[string]string
	for _, l := range leafTable().leaves {
		s, ok := env(l.env)
		if !ok {
			continue
		}
		if err := setFromString(root.FieldByIndex(l.index), s); err != nil {
			return nil, fmt.Errorf("config: environment variable %s (key %s): %w", l.env, l.path, err)
		}
		if set == nil {
			set = map[string]string{}
		}
		set[l.path] = l.env
	}
	return set, nil
}

// nameEnvKeys marks each of err's lines about a key an environment variable
// set with that variable: the file does not hold the bad value, so a person
// reading only the file's name would look in the wrong place.
func nameEnvKeys(err error, fromEnv map[string]string) error {
	if len(fromEnv) == 0 {
		return err
	}
	lines := strings.Split(err.Error(), "\n")
	marked := false
	for i, line := range lines {
		key, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		base, _, _ := strings.Cut(key, "[")
		if v, ok := fromEnv[base]; ok {
			lines[i] = key + " (set by " + v + "):" + rest
			marked = true
		}
	}
	if !marked {
		return err
	}
	return errors.New(strings.Join(lines, "\n"))
}

// applyConventionalEnv fills empty provider keys from their conventional
// variables, such as OPENAI_API_KEY.
func applyConventionalEnv(cfg *Config, env func(string) (string, bool)) {
	for _, name := range ProviderNames {
		p, _ := cfg.Provider(name)
		if v := ConventionalEnv[name]; v != "" && !p.APIKey.IsSet() {
			if s, ok := env(v); ok && s != "" {
				p.APIKey = Secret(s)
			}
		}
	}
}

// leaf is a key an environment variable can set: every non-struct field,
// and the structs that take a whole value (wholeFromEnv). Slices are
// leaves (set whole, as JSON or comma-separated).
type leaf struct {
	path  string // dotted JSON path
	env   string // EnvName(path)
	index []int  // for reflect.Value.FieldByIndex from Config
}

type leaves struct {
	leaves []leaf // in field order, depth first
	envs   []string
	byEnv  map[string]bool
}

// leafTable lists the leaves of Config once: the environment overrides,
// the check for PERCH_ variables that name no key and the secrets' status
// all read it. A start without PERCH_ key variables never builds it.
var leafTable = sync.OnceValue(func() *leaves {
	t := &leaves{byEnv: map[string]bool{}}
	collectLeaves(reflect.TypeOf(Config{}), "", nil, &t.leaves)
	for _, l := range t.leaves {
		t.envs = append(t.envs, l.env)
		t.byEnv[l.env] = true
	}
	return t
})

var wholeFromEnvType = reflect.TypeOf((*wholeFromEnv)(nil)).Elem()

func collectLeaves(t reflect.Type, path string, index []int, out *[]leaf) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		p := join(path, jsonName(f))
		idx := append(append([]int(nil), index...), i)
		if f.Type.Kind() == reflect.Struct {
			if reflect.PointerTo(f.Type).Implements(wholeFromEnvType) {
				*out = append(*out, leaf{path: p, env: EnvName(p), index: idx})
			}
			collectLeaves(f.Type, p, idx, out)
			continue
		}
		*out = append(*out, leaf{path: p, env: EnvName(p), index: idx})
	}
}

func setFromString(v reflect.Value, s string) error {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want true or false, got %q", s)
		}
		v.SetBool(b)
	case reflect.Int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want a whole number, got %q", s)
		}
		v.SetInt(int64(n))
	case reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("want a number, got %q", s)
		}
		v.SetFloat(f)
	case reflect.Slice:
		ptr := reflect.New(v.Type())
		trimmed := strings.TrimSpace(s)
		if strings.HasPrefix(trimmed, "[") {
			if err := json.Unmarshal([]byte(trimmed), ptr.Interface()); err != nil {
				return fmt.Errorf("want a JSON array: %v", err)
			}
		} else if v.Type().Elem().Kind() == reflect.String {
			out := reflect.MakeSlice(v.Type(), 0, 4)
			for _, part := range strings.Split(s, ",") {
				if part = strings.TrimSpace(part); part != "" {
					out = reflect.Append(out, reflect.ValueOf(part).Convert(v.Type().Elem()))
				}
			}
			ptr.Elem().Set(out)
		} else {
			return errors.New("want a JSON array")
		}
		v.Set(ptr.Elem())
	case reflect.Struct:
		u, ok := v.Addr().Interface().(json.Unmarshaler)
		if !ok {
			return fmt.Errorf("cannot be set from the environment (%s)", v.Kind())
		}
		if err := u.UnmarshalJSON([]byte(strings.TrimSpace(s))); err != nil {
			return fmt.Errorf("want JSON: %v", err)
		}
	default:
		return fmt.Errorf("cannot be set from the environment (%s)", v.Kind())
	}
	return nil
}

// SecretState is one secret's path and whether it is set.
type SecretState struct {
	Path string
	Set  bool
}

// SecretValues are the values of every secret set in c: text from outside
// (a provider's error message, which may quote what it was sent) is
// scrubbed of them before it reaches a chat or a log.
//
// It walks the struct itself rather than the leaf table: every gateway
// start asks for it (the provider client keeps the list), and the table's
// first build (names, tags, interface checks) takes 0.15-0.25 ms of a
// start of about 5, against a few microseconds for this walk. Both visit
// the same fields, exported ones of nested structs.
func (c *Config) SecretValues() []string {
	var out []string
	secretsIn(reflect.ValueOf(c).Elem(), &out)
	return out
}

func secretsIn(v reflect.Value, out *[]string) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if !t.Field(i).IsExported() {
			continue
		}
		switch f := v.Field(i); {
		case f.Type() == secretType:
			if s := f.String(); s != "" {
				*out = append(*out, s)
			}
		case f.Kind() == reflect.Struct:
			secretsIn(f, out)
		}
	}
}

// Secrets lists every secret key of c with whether it is set, for status
// output that must never show the values.
func (c *Config) Secrets() []SecretState {
	var out []SecretState
	root := reflect.ValueOf(c).Elem()
	for _, l := range leafTable().leaves {
		if v := root.FieldByIndex(l.index); v.Type() == secretType {
			out = append(out, SecretState{Path: l.path, Set: v.String() != ""})
		}
	}
	return out
}
