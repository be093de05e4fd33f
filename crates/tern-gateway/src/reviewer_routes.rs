//! The list of every reviewer route (see [`crate::reviewer_router`]), gathered from the
//! modules that declare them.

/// Every reviewer route of the gateway, each module's in the order it declares them.
fn all_reviewer_routes() -> Vec<crate::reviewer_router::Route> {
    let mut all = crate::reviewer_api::reviewer_routes();
    all.extend(crate::reviewer_auth::reviewer_routes());
    all.extend(crate::uploads_api::reviewer_routes());
    all.extend(crate::web::reviewer_routes());
    all
}

/// Every route that only a reviewer (a reviewer token or a reviewer's session cookie) may use,
/// as `(method, path pattern)`: the JSON reviewer API, the logout, reviewers' downloads and
/// the web inbox. The login routes, which hand out the credentials, are not among them.
pub fn reviewer_routes() -> &'static [(axum::http::Method, &'static str)] {
    static LIST: std::sync::LazyLock<Vec<(axum::http::Method, &'static str)>> =
        std::sync::LazyLock::new(|| {
            all_reviewer_routes()
                .into_iter()
                .map(|r| (r.method, r.path))
                .collect()
        });
    &LIST
}
