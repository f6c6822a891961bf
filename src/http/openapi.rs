//! `/openapi.json`, generated from the route table in [`super::routes`]: the same list that builds
//! the router, so the document cannot drift from what is served.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{AppState, Auth, routes};

/// Query parameters: (method, path, name, type, description).
const QUERY_PARAMS: &[(&str, &str, &str, &str, &str)] = &[(
    "get",
    "/api/v1/orders/{order_no}",
    "refresh",
    "boolean",
    "ask the gateway now if the order is still pending (at most once per 5 s per attempt)",
)];

pub fn document(with_sandbox: bool) -> Value {
    let mut paths = Map::new();
    for (doc, _) in routes(with_sandbox) {
        let mut params: Vec<Value> = doc
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        for (_, _, name, kind, description) in
            QUERY_PARAMS.iter().filter(|(m, p, ..)| *m == doc.method && *p == doc.path)
        {
            params.push(json!({"name": name, "in": "query", "required": false, "schema": {"type": kind}, "description": description}));
        }
        let mut responses = Map::new();
        for (code, text) in doc.responses {
            responses.insert(code.to_string(), json!({"description": text}));
        }
        // Any operation that reads or writes the database may meet it unreachable.
        responses.entry("503").or_insert_with(|| {
            json!({
                "description": "database_unavailable: the database cannot be reached right now; retry after the given seconds",
                "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait before retrying"}},
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
            })
        });
        responses.insert("default".into(), json!({"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}));
        let mut op = json!({
            "summary": doc.summary,
            "tags": [doc.tag],
            "operationId": format!("{}_{}", doc.method, doc.path.trim_matches('/').replace(['/', '{', '}', '.'], "_")),
            "parameters": params,
            "responses": responses,
        });
        match doc.auth {
            Auth::None => {}
            Auth::Buyer => op["security"] = json!([{"buyer": []}]),
            Auth::Admin => op["security"] = json!([{"admin": []}]),
        }
        if let Some(schema) = doc.body {
            op["requestBody"] = json!({"required": false, "content": {"application/json": {"schema": schema}}});
        }
        let entry = paths.entry(doc.path.to_string()).or_insert_with(|| json!({}));
        entry[doc.method] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "kassa", "version": env!("CARGO_PKG_VERSION"), "description": "Self-hosted payment order engine. Errors are {\"error\": {\"code\", \"message\"}} with a stable code."},
        "paths": paths,
        "components": {
            "securitySchemes": {
                "buyer": {"type": "http", "scheme": "bearer", "description": "token from POST /api/v1/sessions (pages: cookie kassa_session)"},
                "admin": {"type": "http", "scheme": "bearer", "description": "the admin token"}
            },
            "schemas": {"Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {"code": {"type": "string"}, "message": {"type": "string"}, "details": {}}}}}}
        }
    })
}

pub async fn serve(State(state): State<AppState>) -> Response {
    axum::Json(document(state.sandbox.is_some())).into_response()
}
