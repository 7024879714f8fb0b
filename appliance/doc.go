// Package appliance is Perch's composition root: System builds every
// service from the config, starts them in order (agent loop with its tools,
// channels, cron, heartbeat, devices, HTTP) and stops them in the reverse of
// what serving needs (stop accepting, cancel turns, HTTP, devices,
// heartbeat, cron, agent, channels). Beside the wiring it holds the jobs
// only the whole system can do: carrying out a cron firing (jobs.go), the
// chat commands that need several services (slash.go), the admin API routes
// (admin.go) and the web page's first-run setup (setup.go).
//
// Only cmd/perch and test helpers (appliancetest) import this package, as
// tailscale's tsd is imported only by its daemon: the CLI (appliance/cli)
// receives RunGateway and LocalAgent from main instead, and every service
// package stands without it. cmd/perch's layers test holds this rule.
//
// Words: a "chat command" is a slash command answered without the model
// (/help, /cron); a "CLI command" is `perch <name>`; a "command" of a cron
// job or the exec tool is a shell command line.
package appliance
