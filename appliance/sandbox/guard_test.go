package sandbox

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// blockedCases are evasion attempts of every rule: each must be refused by
// the named rule. They also seed the fuzzer.
var blockedCases = []struct {
	line, rule string
}{
	// Recursive forced delete, in every spelling.
	{"rm -rf /", RuleRecursiveRm},
	{"rm -fr build", RuleRecursiveRm},
	{"rm -Rf build", RuleRecursiveRm},
	{"rm -r -f build", RuleRecursiveRm},
	{"rm -f -r build", RuleRecursiveRm},
	{"rm -rvf build", RuleRecursiveRm},
	{"rm --recursive --force build", RuleRecursiveRm},
	{"rm --rec --f build", RuleRecursiveRm},
	{"rm -r --force build", RuleRecursiveRm},
	{"/bin/rm -rf build", RuleRecursiveRm},
	{"/usr/bin/rm -rf build", RuleRecursiveRm},
	{`\rm -rf build`, RuleRecursiveRm},
	{`r'm' -rf build`, RuleRecursiveRm},
	{`"rm" "-rf" build`, RuleRecursiveRm},
	{`rm -r''f build`, RuleRecursiveRm},
	{`r\m -rf build`, RuleRecursiveRm},
	{"RM -RF build", RuleRecursiveRm},
	{"rm${IFS}-rf${IFS}build", RuleRecursiveRm},
	{"rm$IFS-rf build", RuleRecursiveRm},
	{"{rm,-rf,build}", RuleRecursiveRm},
	{"echo hi; rm -rf build", RuleRecursiveRm},
	{"true && rm -rf build", RuleRecursiveRm},
	{"false || rm -rf build", RuleRecursiveRm},
	{"ls | rm -rf build", RuleRecursiveRm},
	{"(rm -rf build)", RuleRecursiveRm},
	{"{ rm -rf build; }", RuleRecursiveRm},
	{"if true; then rm -rf build; fi", RuleRecursiveRm},
	{"for f in a; do rm -rf $f; done", RuleRecursiveRm},
	{"echo $(rm -rf build)", RuleRecursiveRm},
	{"echo \"$(rm -rf build)\"", RuleRecursiveRm},
	{"echo `rm -rf build`", RuleRecursiveRm},
	{"cat <(rm -rf build)", RuleRecursiveRm},
	{"sh -c 'rm -rf build'", RuleRecursiveRm},
	{"bash -c \"rm -rf build\"", RuleRecursiveRm},
	{"bash -ec 'rm -rf build'", RuleRecursiveRm},
	{"bash -o pipefail -c 'rm -rf build'", RuleRecursiveRm},
	{"/bin/sh -c -- 'rm -rf build'", RuleRecursiveRm},
	{"sh -c \"sh -c 'rm -rf build'\"", RuleRecursiveRm},
	{"eval 'rm -rf build'", RuleRecursiveRm},
	{"eval rm -rf build", RuleRecursiveRm},
	{"env rm -rf build", RuleRecursiveRm},
	{"env -i FOO=bar rm -rf build", RuleRecursiveRm},
	{"env -S 'rm -rf build'", RuleRecursiveRm},
	{"FOO=1 rm -rf build", RuleRecursiveRm},
	{"command rm -rf build", RuleRecursiveRm},
	{"exec rm -rf build", RuleRecursiveRm},
	{"nohup rm -rf build &", RuleRecursiveRm},
	{"nice -n 10 rm -rf build", RuleRecursiveRm},
	{"timeout 5 rm -rf build", RuleRecursiveRm},
	{"timeout -s KILL 5 rm -rf build", RuleRecursiveRm},
	{"setsid rm -rf build", RuleRecursiveRm},
	{"stdbuf -oL rm -rf build", RuleRecursiveRm},
	{"time rm -rf build", RuleRecursiveRm},
	{"busybox rm -rf build", RuleRecursiveRm},
	{"xargs rm -rf < list", RuleRecursiveRm},
	{"ls | xargs -I {} rm -rf {}", RuleRecursiveRm},
	{"find . -name '*.o' -exec rm -rf {} \\;", RuleRecursiveRm},
	{"find . -execdir rm -rf {} +", RuleRecursiveRm},
	{"watch -n 1 rm -rf build", RuleRecursiveRm},
	{"trap 'rm -rf build' EXIT", RuleRecursiveRm},
	{"alias x='rm -rf'; x build", RuleRecursiveRm},
	{"x=rm; $x -rf build", RuleRecursiveRm},
	{"x='rm -rf'; ${x} build", RuleRecursiveRm},
	{"$'\\x72\\x6d' -rf build", RuleRecursiveRm},
	{"$'\\162\\155' -rf build", RuleRecursiveRm},
	{"rm \\\n-rf build", RuleRecursiveRm},
	{"f() { rm -rf \"$1\"; }; f build", RuleRecursiveRm},
	{"/???/r? -rf build", RuleRecursiveRm},

	// Windows forced delete.
	{"del /f /s /q C:\\", RuleWindowsDelete},
	{"DEL /F file", RuleWindowsDelete},
	{"erase /q *", RuleWindowsDelete},
	{"rd /s /q C:\\Windows", RuleWindowsDelete},
	{"rmdir /S/Q dir", RuleWindowsDelete},
	{"Remove-Item -Recurse -Force C:\\", RuleWindowsDelete},
	{"remove-item -r -fo dir", RuleWindowsDelete},

	// Formatting and filesystems.
	{"format c:", RuleFormat},
	{"FORMAT C: /Q", RuleFormat},
	{"mkfs.ext4 /dev/sda1", RuleMkfs},
	{"mkfs -t vfat /dev/mmcblk0p1", RuleMkfs},
	{"/sbin/mkfs.vfat x.img", RuleMkfs},
	{"mke2fs /dev/sdb", RuleMkfs},
	{"mkswap /dev/sda2", RuleMkfs},
	{"wipefs -a /dev/sda", RuleMkfs},
	{"diskpart", RuleDiskpart},
	{"diskpart /s script.txt", RuleDiskpart},

	// dd and writes to disk devices.
	{"dd if=/dev/zero of=/dev/sda", RuleDD},
	{"dd if=/dev/zero of=disk.img bs=1M count=1", RuleDD},
	{"dd bs=1M if=/dev/mmcblk0 of=backup.img", RuleDD},
	{"DD IF=x OF=y", RuleDD},
	{"cat x | dd of=/dev/sda", RuleDiskWrite},
	{"echo x > /dev/sda", RuleDiskWrite},
	{"echo x >/dev/sda", RuleDiskWrite},
	{"echo x 1>/dev/mmcblk0", RuleDiskWrite},
	{"cat img >> /dev/nvme0n1", RuleDiskWrite},
	{"cat img &> /dev/sdb", RuleDiskWrite},
	{"cat img > /dev/../dev/sda", RuleDiskWrite},
	{"cat img > /dev/disk/by-id/usb-x", RuleDiskWrite},
	{"cat img > /dev/mapper/root", RuleDiskWrite},
	{"echo 1 > /dev/mem", RuleDiskWrite},
	{"cat img | tee /dev/sda > /dev/null", RuleDiskWrite},
	{"cp disk.img /dev/sdb", RuleDiskWrite},
	{"shred /dev/sda", RuleDiskWrite},

	// Shutdown and reboot.
	{"shutdown -h now", RuleShutdown},
	{"shutdown -r +1", RuleShutdown},
	{"reboot", RuleShutdown},
	{"sudo reboot", RulePrivilege},
	{"/sbin/reboot -f", RuleShutdown},
	{"poweroff", RuleShutdown},
	{"halt -p", RuleShutdown},
	{"init 0", RuleShutdown},
	{"init 6", RuleShutdown},
	{"telinit 0", RuleShutdown},
	{"systemctl poweroff", RuleShutdown},
	{"systemctl reboot --force", RuleShutdown},
	{"systemctl isolate poweroff.target", RuleShutdown},
	{"systemctl suspend", RuleShutdown},
	{"loginctl reboot", RuleShutdown},
	{"echo b > /proc/sysrq-trigger", RuleShutdown},
	{"echo o | tee /proc/sysrq-trigger", RuleShutdown},
	{"kexec -e", RuleShutdown},
	{"sleep 5; reboot", RuleShutdown},
	{"echo $(reboot)", RuleShutdown},

	// Privilege escalation.
	{"sudo ls", RulePrivilege},
	{"sudo -u root id", RulePrivilege},
	{"/usr/bin/sudo -s", RulePrivilege},
	{"su -c 'id'", RulePrivilege},
	{"su root", RulePrivilege},
	{"doas id", RulePrivilege},
	{"pkexec id", RulePrivilege},
	{"run0 id", RulePrivilege},
	{"systemd-run --pty bash", RulePrivilege},
	{"echo pw | sudo -S ls", RulePrivilege},
	{"env sudo ls", RulePrivilege},
	{"nohup sudo ls", RulePrivilege},

	// Fork bombs, classic and renamed.
	{":(){ :|:& };:", RuleForkBomb},
	{":(){ :|: & };:", RuleForkBomb},
	{": () { : | : & } ; :", RuleForkBomb},
	{"bomb(){ bomb|bomb& };bomb", RuleForkBomb},
	{"f() { f & f; }; f", RuleForkBomb},
	{"f(){ f | f; }; f", RuleForkBomb},
	{"f() ( f | f & ); f", RuleForkBomb},
	{"function f { f | f & }; f", RuleForkBomb},
	{"function f() { f|f& }; f", RuleForkBomb},
	{"x(){\nx|x&\n};x", RuleForkBomb},
	{"sh -c ':(){ :|:& };:'", RuleForkBomb},
	{"perl -e 'fork while fork'", RuleForkBomb},
	{"python3 -c 'import os\nwhile True: os.fork()'", RuleForkBomb},
	{"ruby -e 'loop { fork }'", RuleForkBomb},

	// Nesting beyond what is checked.
	{strings.Repeat("eval ", 12) + "true", RuleNesting},
	{"sh -c \"sh -c \\\"sh -c \\\\\\\"rm -rf x\\\\\\\"\\\"\"", RuleRecursiveRm},
}

// allowedCases look like the rules but are not what they block; the
// decisions are documented here.
var allowedCases = []string{
	"grep reboot log.txt",
	"grep -r shutdown /var/log",
	"echo 'rm -rf /'",
	"echo \"sudo make me a sandwich\"",
	"man shutdown",
	"cat notes-about-rm-rf.txt",
	"printf '%s' ':(){ :|:& };:'",
	"rm file.txt",
	"rm -f file.txt",
	"rm -r build",    // recursive without force: asks about protected files; the workspace is all it can reach
	"rm -rv build",   // likewise
	"rm -- -rf",      // a file named -rf
	"rm -i -r build", // interactive
	"find . -name '*.o' -delete",
	"ls -rf",
	"git rm -rf --cached x", // git's rm is not rm
	"git format-patch HEAD~1",
	"clang-format -i main.c",
	"mkdir format",
	"cp -rf src dst", // not a delete
	"dd of=out.img bs=1k count=1 < in.img",
	"dd --help",
	"cat /dev/sda", // a read (Landlock refuses it anyway)
	"echo x > /dev/null",
	"ls -l /dev/sda1",
	"echo x > sda",
	"systemctl status perch",
	"systemctl --user list-units",
	"init",
	"echo init 0",
	"python3 -c 'print(1)'",
	"python3 fork.py",
	"uptime; free -m; df -h",
	"date && sleep 1",
	"f() { echo hi; }; f",
	"countdown() { n=$1; [ $n -gt 0 ] && countdown $((n-1)); }; countdown 3",
	"walk() { for d in *; do echo $d; done; }; walk | sort",
	"echo $(date)",
	"x=1; echo $x",
	"timeout 5 sleep 1",
	"xargs -I {} echo {} < list",
	"sh script.sh",
	"bash -x build.sh",
	"sh -c 'echo hi'",
	"tee out.txt < in.txt",
	"cat <<EOF > note.txt\nhello\nEOF",
	"ls # rm -rf /",
	"vcgencmd measure_temp",
	"",
}

func TestDenyListBlocks(t *testing.T) {
	for _, tc := range blockedCases {
		t.Run(tc.line, func(t *testing.T) {
			err := CheckCommand(tc.line)
			var be *BlockedError
			if !errors.As(err, &be) {
				t.Fatalf("allowed; want rule %s", tc.rule)
			}
			if be.Rule != tc.rule {
				t.Errorf("rule %s, want %s (%v)", be.Rule, tc.rule, err)
			}
			if !strings.Contains(err.Error(), tc.rule) || be.Reason == "" {
				t.Errorf("the refusal does not name the rule: %v", err)
			}
		})
	}
}

func TestDenyListAllows(t *testing.T) {
	for _, line := range allowedCases {
		t.Run(line, func(t *testing.T) {
			if err := CheckCommand(line); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
}

// FuzzDenyList checks properties of the deny list on arbitrary lines: it
// never panics and is deterministic, and a refused line stays refused when
// it is prefixed by another command, run through sh -c, escalated with
// sudo, or written with a path or quotes inside its command name.
func FuzzDenyList(f *testing.F) {
	for _, tc := range blockedCases {
		f.Add(tc.line)
	}
	for _, line := range allowedCases {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if len(line) > 4096 {
			return
		}
		err := CheckCommand(line)
		if again := CheckCommand(line); (err == nil) != (again == nil) {
			t.Fatalf("not deterministic: %v then %v", err, again)
		}
		if CheckCommand("sudo "+line) == nil {
			t.Fatalf("sudo %q allowed", line)
		}
		if err == nil {
			return
		}
		var be *BlockedError
		if !errors.As(err, &be) || be.Rule == "" || ruleReasons()[be.Rule] == "" {
			t.Fatalf("refusal without a known rule: %v", err)
		}
		if CheckCommand("true; "+line) == nil {
			t.Fatalf("%q refused but 'true; ' + it allowed", line)
		}
		if CheckCommand("echo a\n"+line) == nil {
			t.Fatalf("%q refused but after a newline allowed", line)
		}
		if !strings.Contains(line, "'") && utf8.ValidString(line) && CheckCommand("sh -c '"+line+"'") == nil {
			t.Fatalf("%q refused but sh -c '…' of it allowed", line)
		}
		// The first word is a plain command name: write it with a path,
		// with quotes inside and with a backslash, as a shell allows.
		name, rest, _ := strings.Cut(line, " ")
		if isPlainName(name) {
			for _, variant := range []string{
				"/usr/bin/" + name,
				name[:1] + "''" + name[1:],
				`\` + name,
				`"` + name + `"`,
			} {
				if CheckCommand(variant+" "+rest) == nil {
					t.Fatalf("%q refused but %q allowed", line, variant+" "+rest)
				}
			}
		}
	})
}

func isPlainName(s string) bool {
	if len(s) < 2 || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return false
		}
	}
	// Words that are syntax, not commands, change meaning with a path.
	switch s {
	case "if", "then", "elif", "else", "fi", "do", "done", "while", "until", "for", "in",
		"case", "esac", "function", "select", "time", "!":
		return false
	}
	return !strings.Contains(s, "=")
}
