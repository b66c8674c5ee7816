// Starts Swagger UI or ReDoc on the page that loaded it (sqsjobs.api.docs_pages): a file, not an
// inline script, so the page's Content-Security-Policy can forbid inline script.
(function () {
  "use strict";
  var body = document.body;
  var url = body.getAttribute("data-openapi");
  var viewer = body.getAttribute("data-viewer");
  if (viewer === "swagger-ui" && window.SwaggerUIBundle) {
    window.ui = window.SwaggerUIBundle({
      url: url,
      dom_id: "#swagger-ui",
      deepLinking: true,
      showExtensions: true,
      showCommonExtensions: true,
      presets: [window.SwaggerUIBundle.presets.apis],
      layout: "BaseLayout",
      validatorUrl: null, // no badge fetched from validator.swagger.io: nothing loads from elsewhere
    });
  } else if (viewer === "redoc" && window.Redoc) {
    window.Redoc.init(url, {}, document.getElementById("redoc"));
  }
})();
