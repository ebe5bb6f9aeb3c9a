// Non-variadic wrappers for the libcurl calls HTTPClient makes.
//
// `curl_easy_setopt` and `curl_easy_getinfo` are variadic, which Swift cannot call: each
// wrapper below fixes the type of the value. Everything is `static inline`.
#ifndef IMGPIPE_CCURL_SHIM_H
#define IMGPIPE_CCURL_SHIM_H

#include <curl/curl.h>

typedef size_t (*ip_curl_data_fn)(char *data, size_t size, size_t count, void *context);
typedef int (*ip_curl_progress_fn)(void *context, curl_off_t download_total, curl_off_t download_now,
                                   curl_off_t upload_total, curl_off_t upload_now);

static inline CURLcode ip_curl_set_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ip_curl_set_offset(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

/// Strings are copied by libcurl (except CURLOPT_POSTFIELDS, set with ip_curl_set_pointer).
static inline CURLcode ip_curl_set_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ip_curl_set_pointer(CURL *handle, CURLoption option, const void *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ip_curl_set_headers(CURL *handle, struct curl_slist *headers) {
    return curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers);
}

static inline CURLcode ip_curl_set_write_function(CURL *handle, ip_curl_data_fn function) {
    return curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, function);
}

static inline CURLcode ip_curl_set_header_function(CURL *handle, ip_curl_data_fn function) {
    return curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, function);
}

static inline CURLcode ip_curl_set_progress_function(CURL *handle, ip_curl_progress_fn function) {
    return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, function);
}

typedef curl_socket_t (*ip_curl_socket_fn)(void *context, curlsocktype purpose, struct curl_sockaddr *address);

/// The function that opens each socket libcurl connects with, after name resolution: where
/// `AddressPolicy` refuses an address before any packet is sent to it.
static inline CURLcode ip_curl_set_opensocket_function(CURL *handle, ip_curl_socket_fn function) {
    return curl_easy_setopt(handle, CURLOPT_OPENSOCKETFUNCTION, function);
}

/// The address of a `curl_sockaddr`'s `addr` (as long as `addrlen` says: room for an IPv6
/// address, which `struct sockaddr` has not).
static inline const void *ip_curl_sockaddr_address(const struct curl_sockaddr *address) {
    return &address->addr;
}

static inline CURLcode ip_curl_get_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLcode ip_curl_get_offset(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}

/// `location` resolved against `base` as libcurl resolves a redirect's `Location` when it
/// follows it (its URL API, with the flags `Curl_follow` gives it: spaces allowed, other
/// characters URL-encoded). A string to free with `curl_free`, or NULL when libcurl cannot
/// resolve it (and so would not follow it).
static inline char *ip_curl_resolve_redirect(const char *base, const char *location) {
    CURLU *url = curl_url();
    if (!url) return NULL;
    char *out = NULL;
    if (curl_url_set(url, CURLUPART_URL, base, 0) == CURLUE_OK &&
        curl_url_set(url, CURLUPART_URL, location, CURLU_URLENCODE | CURLU_ALLOW_SPACE) == CURLUE_OK) {
        if (curl_url_get(url, CURLUPART_URL, &out, 0) != CURLUE_OK) out = NULL;
    }
    curl_url_cleanup(url);
    return out;
}

#endif
