// Package appliance is Perch's composition root: it builds every service
// from the config, starts them in the spec's order (agent loop with its
// tools, channels, cron, heartbeat, devices, HTTP) and stops them in the
// reverse of what serving needs (stop accepting, cancel turns, HTTP, devices,
// heartbeat, cron, agent, channels). It also holds one function per CLI
// command; cmd/perch only parses flags and calls them.
package appliance
