mod api;
mod boot;
mod errors;
mod inbox_api;
mod inbox_decisions;
mod inbox_uploads_policies;
mod reviewers;
mod web;
