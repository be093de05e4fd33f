mod command_hooks;
mod webhooks;
