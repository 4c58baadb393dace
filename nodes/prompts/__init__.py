"""Prompt texts of the chat-model roles (Markdown files read by nodes.llm.context.load_prompt)."""
