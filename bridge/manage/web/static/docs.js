/* celery-periodic-bridge: starts Swagger UI on /docs. A file of its own, not an inline
   script, so that the page keeps the server's Content-Security-Policy. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    var root = document.getElementById("swagger-ui");
    window.ui = window.SwaggerUIBundle({
      url: root.getAttribute("data-openapi"),
      domNode: root,
      layout: "BaseLayout",
      deepLinking: true,
      showExtensions: true,
      showCommonExtensions: true,
      // No badge fetched from the validator's host: the page talks to this server only.
      validatorUrl: null,
      presets: [window.SwaggerUIBundle.presets.apis]
    });
  });
})();
