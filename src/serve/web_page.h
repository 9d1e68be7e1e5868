// rn50 serve: the page GET / answers — one self-contained HTML document (styles and script
// inline, no external assets): pick or drop an image, see the top-5 classes with their
// probabilities and the request's latency (POST /v2/models/{m}/classify), and the model's live
// figures (GET /v2/models/{m}/stats every 2 s). Element ids the browser test drives: #model
// (select), #file (input type=file), #predictions (rows of class "prediction"), #latency,
// #stats.
#pragma once

namespace rn50::serve {

/// The page's HTML (UTF-8).
extern const char* const kWebPage;

}  // namespace rn50::serve
