package main

// CLI is what the man page and the completion are made from.
type CLI struct {
	Description string    // one line: what perch is
	Commands    []Command // in the order the help lists them
	Global      []Flag    // flags every command accepts
	Notes       []string  // paragraphs after the command list
}

// Command is one `perch NAME …` command.
type Command struct {
	Name        string
	Synopsis    []string // "perch cron list [--json]", one per form
	Summary     string   // what it does; may be empty
	Subcommands []string // literal second words: list, add, …
	Flags       []Flag
}

// Flag is one option. Name has no dashes; Arg is the value's name, empty
// for a boolean flag.
type Flag struct {
	Name  string
	Arg   string
	Usage string
}

// Spelling returns the flag as users type it: -m for one letter, --name
// otherwise (Go's flag package takes both).
func (f Flag) Spelling() string {
	if len(f.Name) == 1 {
		return "-" + f.Name
	}
	return "--" + f.Name
}
