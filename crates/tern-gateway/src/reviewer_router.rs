//! The reviewers' routes as one list. Every route that takes the [`Reviewer`] extractor is
//! declared through [`get`] or [`post`] here, which keep its method and path beside its
//! handler: the router is built from the list, and [`crate::reviewer_routes`] gives the same list to
//! the tests (an agent key gets 403 on every reviewer route), so a new route cannot be left
//! out of them.
//!
//! [`Reviewer`]: crate::reviewer_auth::Reviewer

use axum::Router;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{self, MethodRouter};

use crate::AppState;

/// One reviewer route: its method, its path pattern and its handler.
pub(crate) struct Route {
    pub(crate) method: Method,
    pub(crate) path: &'static str,
    handler: MethodRouter<AppState>,
}

/// `GET path` → `handler`.
pub(crate) fn get<H, T>(path: &'static str, handler: H) -> Route
where
    H: Handler<T, AppState>,
    T: 'static,
{
    Route {
        method: Method::GET,
        path,
        handler: routing::get(handler),
    }
}

/// `POST path` → `handler`.
pub(crate) fn post<H, T>(path: &'static str, handler: H) -> Route
where
    H: Handler<T, AppState>,
    T: 'static,
{
    Route {
        method: Method::POST,
        path,
        handler: routing::post(handler),
    }
}

/// The router of `routes`.
pub(crate) fn router(routes: Vec<Route>) -> Router<AppState> {
    routes
        .into_iter()
        .fold(Router::new(), |r, route| r.route(route.path, route.handler))
}
