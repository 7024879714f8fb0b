package tools

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// myTools are the tools built in this package's files fs, web, message,
// canvas and image, configured as the gateway's defaults configure them.
func myTools() []Tool {
	tools := NewFS(FSOptions{Dir: "/var/lib/perch/workspace", Restrict: true})
	return append(tools,
		NewWebSearch(WebSearchOptions{}),
		NewWebFetch(WebFetchOptions{}),
		NewMessage(MessageOptions{}),
		NewCanvas(),
		NewImage(ImageOptions{}),
	)
}

// TestToolDefinitionsGolden pins what models read about these tools: names,
// descriptions and parameter schemas, in the provider's wire format. Review a
// diff here as you would a change to a user interface.
func TestToolDefinitionsGolden(t *testing.T) {
	r := registryOf(myTools()...)
	b, err := json.MarshalIndent(r.ProviderDefinitions(), "", "  ")
	must(t, err)
	golden(t, "definitions.golden.json", append(b, '\n'))

	var sb strings.Builder
	for _, s := range r.Summaries() {
		sb.WriteString(s + "\n")
	}
	golden(t, "summaries.golden.txt", []byte(sb.String()))
}

// TestToolDefinitionsWellFormed checks what providers reject and what
// misleads a model: bad names, missing descriptions, required arguments
// that are not declared.
func TestToolDefinitionsWellFormed(t *testing.T) {
	name := regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	seen := map[string]bool{}
	for _, tool := range myTools() {
		n := tool.Name()
		t.Run(n, func(t *testing.T) {
			if !name.MatchString(n) {
				t.Errorf("name %q is not a valid function name", n)
			}
			if seen[n] {
				t.Errorf("name %q used twice", n)
			}
			seen[n] = true
			d := tool.Description()
			if d == "" || !strings.HasSuffix(d, ".") || strings.Contains(d, "  ") {
				t.Errorf("description %q: want sentences ending in a full stop", d)
			}
			s := tool.Schema()
			if s.Type != "object" {
				t.Errorf("schema type %q", s.Type)
			}
			for _, req := range s.Required {
				if s.Properties[req] == nil {
					t.Errorf("required %q is not a property", req)
				}
			}
			for pn, p := range s.Properties {
				if p.Description == "" {
					t.Errorf("property %q has no description", pn)
				}
				if !slices.Contains([]string{"string", "integer", "number", "boolean", "array", "object"}, p.Type) {
					t.Errorf("property %q has type %q", pn, p.Type)
				}
				if p.Default != nil {
					// A default must itself be valid, or the model copies a
					// value the validator refuses.
					if _, err := p.check(pn, p.Default); err != nil {
						t.Errorf("default of %q is invalid: %v", pn, err)
					}
				}
			}
		})
	}
}
