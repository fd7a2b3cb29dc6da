// The API reference at /docs: Swagger UI (vendored, Apache-2.0, licenses/) over this server's own OpenAPI document.
// Nothing leaves the machine: no validator badge, no remote spec URL from the query string.
window.ui = window.SwaggerUIBundle({
  url: "/schema/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  queryConfigEnabled: false,
  deepLinking: true,
  docExpansion: "list",
  tryItOutEnabled: false,
  presets: [window.SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
