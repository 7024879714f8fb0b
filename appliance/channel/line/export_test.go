package line

// RepliesHeld is how many messages' reply and quote tokens are held.
func (c *Channel) RepliesHeld() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tokens)
}
