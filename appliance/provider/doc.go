// Package provider talks to the upstream language-model providers.
//
// # Concepts
//
// Every supported provider (openai, openrouter, anthropic, gemini, groq,
// deepseek, ollama) speaks the OpenAI chat-completions protocol at its
// api_base, so one client (go-openai) serves them all. Select picks the
// provider and the upstream model name from the config: an
// explicit agents.defaults.provider wins; an aggregator vendor prefix
// (openai/, anthropic/, google/, meta-llama/, deepseek/, openrouter/) selects
// openrouter; then the model's own provider prefix or family; then
// openrouter when it has a key; then the only configured provider.
//
// Below go-openai sits a transport that adds what the library lacks: retries
// of 429 and 5xx with exponential backoff, jitter and Retry-After, bounded in
// attempts and total time; the aggregator's route/models fields; a
// temperature of exactly 0 (which go-openai's omitempty would drop); and
// bearer tokens from application default credentials for gemini with
// auth_method gcloud-adc/adc.
//
// Upstream failures become *Error values whose Kind says what went wrong
// (authentication, unknown model, rate limit, no credits, other status,
// unreachable) and whose message says what to do. Messages from upstream are
// scrubbed of the API key before they reach an error.
package provider
