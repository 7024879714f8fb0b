// Package schedule runs cron jobs and the heartbeat.
//
// # Concepts
//
// A Job has exactly one schedule: at_seconds (once, that many seconds after
// it was added), every_seconds (recurring) or cron_expr (five fields, in the
// job's tz or agents.defaults.timezone). Jobs live in the store's cron bucket
// and survive restarts; a one-time job whose moment passed while the gateway
// was down runs at the next start rather than never. After a one-time job
// runs it is disabled and has no next run.
//
// What a firing does is the Runner's business (the appliance delivers the
// message, asks the agent, or runs the command in the sandbox); the service
// records last_run and last_result.
//
// The heartbeat prompts the agent every interval with the workspace's
// HEARTBEAT.md, without session history, and only when that file has tasks.
package schedule
