package sandbox

// safePath is the only PATH a command gets: the system directories it can
// read anyway. The gateway's own PATH could name directories the sandbox
// hides, and nothing of the gateway's environment is passed on by default.
const safePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// defaultLang is used when the gateway has no LANG: UTF-8 output keeps
// non-ASCII file names readable for the model.
const defaultLang = "C.UTF-8"

// buildEnv returns a command's whole environment, built from an allow list
// and never inherited: provider keys, tokens and PERCH_* variables of the
// gateway stay out of reach of `env` and of the command's /proc/self/environ.
// lookup reads the gateway's environment (os.LookupEnv) for LANG and TZ.
func buildEnv(home, tmp string, lookup func(string) (string, bool)) []string {
	env := []string{
		"PATH=" + safePath,
		"HOME=" + home,
		"TMPDIR=" + tmp,
	}
	if v, ok := lookup("LANG"); ok && v != "" && isPlainValue(v) {
		env = append(env, "LANG="+v)
	} else {
		env = append(env, "LANG="+defaultLang)
	}
	if v, ok := lookup("TZ"); ok && v != "" && isPlainValue(v) {
		env = append(env, "TZ="+v)
	}
	return env
}

// isPlainValue accepts locale and zone names (C.UTF-8, en_GB.UTF-8,
// Europe/Paris, :/etc/localtime, UTC+2), so nothing else rides along under
// an allowed name.
func isPlainValue(v string) bool {
	if len(v) > 64 {
		return false
	}
	for _, r := range v {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '.', r == '_', r == '-', r == '/', r == ':', r == '+', r == '@':
		default:
			return false
		}
	}
	return true
}

// goRuntimeVars configure the Go runtime. The launcher is a Go program, so
// it runs with the gateway's settings (GOMEMLIMIT matters on a small board);
// they never reach the shell, whose environment is buildEnv's alone.
var goRuntimeVars = []string{"GODEBUG", "GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GORACE", "GOTRACEBACK"}

// launcherEnv is the launcher's own environment.
func launcherEnv(lookup func(string) (string, bool)) []string {
	env := []string{}
	for _, k := range goRuntimeVars {
		if v, ok := lookup(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
